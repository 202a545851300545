//! What every call of one connection shares: the account, the client options (one HTTP client
//! and the SAS policy) and the runtime the calls run on; the connection, its channels and its
//! producers each hold a copy.

use azure_core::http::{ClientOptions, Transport};
use azure_storage_queue::{QueueClient, QueueClientOptions};

use super::account::{AzureAccount, SasPolicy};
use crate::runtime::GatewayRuntime;

/// What every call of one connection shares: the account, the client options (its one HTTP
/// client and the SAS policy) and the runtime the calls run on.
#[derive(Clone)]
pub(super) struct Clients {
    account: AzureAccount,
    options: ClientOptions,
    runtime: GatewayRuntime,
}

impl Clients {
    pub(super) fn new(account: AzureAccount, runtime: GatewayRuntime) -> Clients {
        let options = ClientOptions {
            // One HTTP client (and its pool of connections) for every queue client made here.
            transport: Some(Transport::default()),
            per_call_policies: vec![SasPolicy::new(account.clone())],
            ..ClientOptions::default()
        };
        Clients { account, options, runtime }
    }

    /// The client of `queue` (a checked name): cheap, it shares the HTTP client.
    pub(super) fn queue(&self, queue: &str) -> QueueClient {
        let options = QueueClientOptions { client_options: self.options.clone(), ..QueueClientOptions::default() };
        QueueClient::new(self.account.queue_url(queue), None, Some(options)).expect("a queue URL is a base URL")
    }

    pub(super) fn runtime(&self) -> &GatewayRuntime {
        &self.runtime
    }

    pub(super) fn account(&self) -> &AzureAccount {
        &self.account
    }

    pub(super) fn options(&self) -> &ClientOptions {
        &self.options
    }
}
