//! The consumer: receive by leasing the oldest visible row (`FOR UPDATE SKIP LOCKED`), settle
//! by deleting it or moving its visibility deadline, reject in one transaction.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio_postgres::Client;

use super::broker_error;
use super::producer::insert;
use super::subscription::PostgresSubscription;
use crate::budget::CountingReport;
use crate::channel::Channel;
use crate::error::ChannelError;
use crate::message::Message;
use crate::rejection::Rejection;
use crate::runtime::GatewayRuntime;
use crate::subscription::Subscription;
use crate::transport::attributes::{self, MalformedMessage, ReaderWarnings};
use crate::transport::kit::{self, AfterRouting};
use crate::transport::receive_loop::receive_readable;

/// Leases the queue's oldest visible row and counts the delivery on it.
const RECEIVE: &str = "UPDATE gateway_queue SET deliveries = deliveries + 1, leased = true, \
                       visible_at = now() + make_interval(secs => $2) \
                       WHERE id = (SELECT id FROM gateway_queue WHERE queue = $1 AND visible_at <= now() \
                                   ORDER BY visible_at, id LIMIT 1 FOR UPDATE SKIP LOCKED) \
                       RETURNING id, deliveries, attribute_names, attribute_values, body";
/// The delivery's lease holds: not released, not received again, not lapsed.
const HELD: &str = "id = $1 AND deliveries = $2 AND leased AND visible_at > now()";

fn acknowledge_statement() -> String {
    format!("DELETE FROM gateway_queue WHERE {HELD}")
}

fn release_statement() -> String {
    format!("UPDATE gateway_queue SET visible_at = now() + make_interval(secs => $3), leased = false WHERE {HELD}")
}

/// A received row: what the reader reads.
#[derive(Debug, Clone)]
pub struct ReceivedRow {
    pub id: i64,
    /// The row's own delivery counter: 1 on the first receive, one more on each.
    pub deliveries: i32,
    pub attribute_names: Vec<String>,
    pub attribute_values: Vec<String>,
    pub body: Vec<u8>,
}

impl ReceivedRow {
    fn receipt(&self) -> String {
        format!("{}:{}", self.id, self.deliveries)
    }

    fn from_row(row: &tokio_postgres::Row) -> Result<ReceivedRow, tokio_postgres::Error> {
        Ok(ReceivedRow {
            id: row.try_get(0)?,
            deliveries: row.try_get(1)?,
            attribute_names: row.try_get(2)?,
            attribute_values: row.try_get(3)?,
            body: row.try_get(4)?,
        })
    }
}

/// The reader: a received row as a `Message`, its handled count resolved with the row's
/// delivery counter. The receipt names the row and this delivery.
pub fn read_row(row: &ReceivedRow, warnings: &ReaderWarnings) -> Result<Message, MalformedMessage> {
    let body = std::str::from_utf8(&row.body)
        .map_err(|e| MalformedMessage { detail: format!("the body is not UTF-8: {e}") })?;
    let attribute = |name: &str| {
        let position = row.attribute_names.iter().position(|n| n == name)?;
        row.attribute_values.get(position).map(String::as_str)
    };
    attributes::read_message(attribute, body, Some(i64::from(row.deliveries)), Some(row.receipt()), warnings)
}

/// The row and delivery a receipt names.
fn parse_receipt(receipt: &str) -> Option<(i64, i32)> {
    let (id, deliveries) = receipt.split_once(':')?;
    Some((id.parse().ok()?, deliveries.parse().ok()?))
}

pub struct PostgresChannel {
    runtime: GatewayRuntime,
    /// Receives and plain settlements, pipelined on the connection's shared client.
    statements: Arc<Client>,
    /// The channel's own connection, for reject's transaction.
    transactions: Arc<tokio::sync::Mutex<Client>>,
    subscription: Subscription,
    lease: Duration,
    poll_interval: Duration,
    call_deadline: Duration,
    warnings: ReaderWarnings,
    counting: CountingReport,
}

impl PostgresChannel {
    pub(super) fn new(
        runtime: GatewayRuntime,
        statements: Arc<Client>,
        transactions: Client,
        postgres: &PostgresSubscription,
    ) -> PostgresChannel {
        let subscription = postgres.subscription.clone();
        PostgresChannel {
            runtime,
            statements,
            transactions: Arc::new(tokio::sync::Mutex::new(transactions)),
            warnings: ReaderWarnings::new(&subscription.name),
            counting: CountingReport::of(postgres),
            subscription,
            lease: postgres.lease,
            poll_interval: postgres.poll_interval,
            call_deadline: postgres.call_deadline,
        }
    }

    /// Runs `call` within the call deadline (`kit::within`). A call cut off may still have reached
    /// the server: a receive's lease then brings the row back when it lapses, counted; a reject's
    /// transaction commits whole or not at all.
    async fn within<R: Send + 'static>(
        &self,
        operation: &'static str,
        call: impl Future<Output = R> + Send + 'static,
    ) -> Result<R, ChannelError> {
        kit::within(&self.runtime, self.name(), operation, self.call_deadline, call).await
    }

    async fn receive_one(&self) -> Result<Option<ReceivedRow>, ChannelError> {
        let (client, queue, lease) =
            (self.statements.clone(), self.subscription.routing_key.clone(), self.lease.as_secs_f64());
        self.within("receive", async move {
            match client.query_opt(RECEIVE, &[&queue, &lease]).await? {
                Some(row) => ReceivedRow::from_row(&row).map(Some),
                None => Ok(None),
            }
        })
        .await?
        .map_err(|e| broker_error(self.name(), "receive", e))
    }

    /// Deletes (`None`) or releases after `delay` the row `message` was received from, while
    /// its delivery's lease holds.
    async fn settle(
        &self,
        message: &Message,
        release: Option<Duration>,
        operation: &'static str,
    ) -> Result<(), ChannelError> {
        let not_in_flight = || kit::not_in_flight(self.name(), operation, message);
        let (id, deliveries) = message.receipt.as_deref().and_then(parse_receipt).ok_or_else(not_in_flight)?;
        let client = self.statements.clone();
        let changed = self
            .within(operation, async move {
                match release {
                    None => client.execute(&acknowledge_statement(), &[&id, &deliveries]).await,
                    Some(delay) => {
                        client.execute(&release_statement(), &[&id, &deliveries, &delay.as_secs_f64()]).await
                    }
                }
            })
            .await?
            .map_err(|e| broker_error(self.name(), operation, e))?;
        if changed == 0 {
            return Err(not_in_flight());
        }
        Ok(())
    }

    /// The raw row, for routing when it cannot be read.
    fn unreadable(&self, row: ReceivedRow) -> Message {
        let body = String::from_utf8_lossy(&row.body);
        attributes::unreadable(&format!("row-{}", row.id), &self.subscription.routing_key, &body, Some(row.receipt()))
    }
}

#[async_trait]
impl Channel for PostgresChannel {
    /// Nothing is held by the client: a row not settled is received again when its `visible_at` lease lapses.
    async fn close(&self) -> Result<(), ChannelError> {
        Ok(())
    }

    // A channel is named after its subscription.
    fn name(&self) -> &str {
        &self.subscription.name
    }

    async fn receive(&self, timeout: Duration) -> Result<Option<Message>, ChannelError> {
        let fetch = |_wait| self.receive_one();
        let route =
            move |row, problem| async move { kit::route_unreadable(self, &self.unreadable(row), problem).await };
        let read = |row: &ReceivedRow| read_row(row, &self.warnings);
        receive_readable(timeout, self.poll_interval, fetch, read, route).await
    }

    async fn acknowledge(&self, message: &Message) -> Result<(), ChannelError> {
        self.settle(message, None, "acknowledge").await
    }

    /// The stamped copy is inserted and the original deleted in one transaction: a failure
    /// between them commits neither, and the original is released for another attempt.
    async fn reject(&self, message: &Message, rejection: Option<&Rejection>) -> Result<bool, ChannelError> {
        let not_in_flight = kit::not_in_flight(self.name(), "reject", message);
        let Some((id, deliveries)) = message.receipt.as_deref().and_then(parse_receipt) else {
            return Err(not_in_flight);
        };
        let (transactions, statements) = (self.transactions.clone(), self.statements.clone());
        let (subscription, message, rejection) = (self.subscription.clone(), message.clone(), rejection.cloned());
        self.within("reject", async move {
                let name = subscription.name.as_str();
                let release = async || {
                    let released = statements.execute(&release_statement(), &[&id, &deliveries, &0f64]).await;
                    if let Err(error) = released {
                        tracing::warn!(channel = name, %error, "releasing after a failed reject failed too; the lease will redeliver it");
                    }
                };
                let mut connection = transactions.lock().await;
                let transaction = match connection.transaction().await {
                    Ok(transaction) => transaction,
                    Err(error) => {
                        release().await;
                        return Err(broker_error(name, "reject: begin", error));
                    }
                };
                let open = tokio::sync::Mutex::new(Some(transaction));
                let publish = async |queue: &str, copy: Message| {
                    let open = open.lock().await;
                    let transaction = open.as_ref().expect("the transaction is open until the original is settled");
                    insert(transaction, queue, &copy, Duration::ZERO)
                        .await
                        .map_err(|e| broker_error(queue, "reject: insert the copy", e))
                };
                let settle = async |after| {
                    let transaction = open.lock().await.take().expect("settled once");
                    match after {
                        AfterRouting::Acknowledge => {
                            let deleted = match transaction.execute(&acknowledge_statement(), &[&id, &deliveries]).await {
                                // Dropped uncommitted: rolled back, the copy with it.
                                Ok(0) => return Err(not_in_flight),
                                Ok(_) => transaction.commit().await,
                                Err(error) => Err(error),
                            };
                            if let Err(error) = deleted {
                                release().await;
                                return Err(broker_error(name, "reject: delete the original", error));
                            }
                            Ok(())
                        }
                        AfterRouting::Release => {
                            drop(transaction);
                            release().await;
                            Ok(())
                        }
                    }
                };
                kit::reject_by_forwarding(name, &subscription, &message, rejection.as_ref(), publish, settle).await
            })
            .await?
    }

    /// `visible_at` becomes now + the delay: received again not before it.
    async fn requeue(&self, message: &Message, delay: Duration) -> Result<(), ChannelError> {
        self.settle(message, Some(delay), "requeue").await
    }

    /// `visible_at` becomes now: received again at the next poll.
    async fn nack(&self, message: &Message) -> Result<(), ChannelError> {
        self.settle(message, Some(Duration::ZERO), "nack").await
    }

    fn counting(&self) -> Option<CountingReport> {
        Some(self.counting.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{BagValue, MessageType};
    use crate::rejection::keys;

    /// `sent` as a row received for the `deliveries`-th time.
    fn received(sent: &Message, deliveries: i32) -> ReceivedRow {
        let (names, values) = attributes::header_attributes(sent).into_iter().map(|(n, v)| (n.to_owned(), v)).unzip();
        ReceivedRow {
            id: 7,
            deliveries,
            attribute_names: names,
            attribute_values: values,
            body: sent.body.bytes.clone(),
        }
    }

    #[test]
    fn each_delivery_presents_the_row_counter_less_one_and_a_receipt_naming_it() {
        let mut sent = Message::new("orders", MessageType::Command, "x");
        sent.header.handled_count = 5;
        let read: Vec<Message> =
            (1..=4).map(|n| read_row(&received(&sent, n), &ReaderWarnings::default()).unwrap()).collect();
        assert_eq!(read.iter().map(|m| m.header.handled_count).collect::<Vec<_>>(), [0, 1, 2, 3]);
        assert_eq!(read[2].receipt.as_deref(), Some("7:3"));
        assert_eq!(parse_receipt("7:3"), Some((7, 3)));
        assert_eq!(parse_receipt("7"), None);
    }

    #[test]
    fn the_header_round_trips_through_the_attribute_columns() {
        let mut sent = Message::new("orders", MessageType::Event, "{\"a\":1}");
        sent.header.correlation_id = Some("c-1".into());
        sent.header.bag.insert("number".into(), BagValue::Int(-7));
        let read = read_row(&received(&sent, 1), &ReaderWarnings::default()).unwrap();
        assert_eq!(read.header.id, sent.header.id);
        assert_eq!(read.header.correlation_id, sent.header.correlation_id);
        assert_eq!(read.header.bag, sent.header.bag);
        assert_eq!(read.body.bytes, sent.body.bytes);
    }

    /// a routed rejection copy keeps its stamped count whatever the row's counter reads.
    #[test]
    fn a_rejection_copy_keeps_its_stamped_count_over_the_dead_letter_queue_counter() {
        let mut received_message = Message::new("orders", MessageType::Command, "x");
        received_message.header.handled_count = 3;
        let copy = crate::rejection::stamp(&received_message, Some(&Rejection::delivery_error("budget spent")));
        for deliveries in [1, 5] {
            let read = read_row(&received(&copy, deliveries), &ReaderWarnings::default()).unwrap();
            assert_eq!(read.header.handled_count, 3);
            assert!(read.header.bag.contains_key(keys::REJECTION_REASON));
        }
    }

    #[test]
    fn a_row_without_the_header_is_malformed() {
        let row = ReceivedRow {
            id: 1,
            deliveries: 1,
            attribute_names: vec![],
            attribute_values: vec![],
            body: b"raw".to_vec(),
        };
        let problem = read_row(&row, &ReaderWarnings::default()).unwrap_err();
        assert!(problem.detail.contains("messageType"), "{problem}");
    }
}
