//! Another consumer process: the cell's own test binary, started again to run just the cell's
//! test as a peer. ADR 0077 reads the broker's counter because a count kept anywhere in the
//! consuming process cannot see deliveries to another process (another pod reading the same
//! queue); a peer is such a process. It reaches this binary's broker through the transport's
//! endpoint variable (`CONFORMANCE_BROKERS=env`), makes the cell's channel again with the cell's
//! names (creating nothing), receives the message and releases it (nack) as often as asked,
//! prints what it was presented, and exits, its channel and connection going with it.
//!
//! The request travels in [`VARIABLE`]; [`crate::builder::build`] serves it in place of building
//! a cell, so every configuration has a peer without code of its own.

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use gateway::Channel;

/// Asks a started binary to be a peer: `<unique cell name>\t<message id>\t<releases>\t<arrival ms>`.
pub const VARIABLE: &str = "CONFORMANCE_PEER";

/// The peer's report on stdout: `peer presented <count>,<count>,…`.
const REPORT: &str = "peer presented ";

/// Each transport's endpoint variable (from `source::start`) and the endpoint its broker
/// answered on (from `source::require_answer`): what a peer is told to use.
static ENDPOINTS: Mutex<BTreeMap<String, Endpoint>> = Mutex::new(BTreeMap::new());

/// A transport's endpoint variable and the value its broker answered on, as far as known.
type Endpoint = (Option<&'static str>, Option<String>);

pub(crate) fn record_variable(transport: &str, variable: &'static str) {
    ENDPOINTS.lock().unwrap_or_else(|p| p.into_inner()).entry(transport.to_owned()).or_default().0 = Some(variable);
}

pub(crate) fn record_endpoint(transport: &str, endpoint: &str) {
    let mut endpoints = ENDPOINTS.lock().unwrap_or_else(|p| p.into_inner());
    endpoints.entry(transport.to_owned()).or_default().1 = Some(endpoint.to_owned());
}

/// A peer's task, read from [`VARIABLE`] in the peer process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub unique: String,
    pub id: String,
    pub releases: u32,
    /// How long the peer waits for each arrival: the cell's own bound for a ready message to be
    /// served (a fixed wait would make a transport that never serves a second process, as a
    /// Kafka group pinning its one partition, cost the same long wait on every run).
    pub arrival: Duration,
}

impl Request {
    fn encode(&self) -> String {
        format!("{}\t{}\t{}\t{}", self.unique, self.id, self.releases, self.arrival.as_millis())
    }

    fn decode(value: &str) -> Result<Request, String> {
        let fields: Vec<&str> = value.split('\t').collect();
        let [unique, id, releases, arrival] = fields[..] else {
            return Err(format!(
                "{VARIABLE}={value:?}: expected <unique cell name>\\t<message id>\\t<releases>\\t<arrival ms>"
            ));
        };
        let whole = |name: &str, field: &str| -> Result<u64, String> {
            field.parse().map_err(|_| format!("{VARIABLE}={value:?}: {name} {field:?} is not a whole number"))
        };
        let releases = u32::try_from(whole("releases", releases)?)
            .map_err(|_| format!("{VARIABLE}={value:?}: releases {releases:?} is too large"))?;
        let arrival = Duration::from_millis(whole("arrival ms", arrival)?);
        Ok(Request { unique: unique.to_owned(), id: id.to_owned(), releases, arrival })
    }

    /// The request this process was started with, if it is a peer.
    pub fn from_environment() -> Option<Request> {
        let value = std::env::var(VARIABLE).ok()?;
        Some(Request::decode(&value).unwrap_or_else(|problem| panic!("{problem}")))
    }
}

/// The endpoint variable and value of the one broker this binary started (a test binary is one
/// transport's); none when the broker lives inside the process (the in-memory transport).
fn shared_broker() -> Result<(&'static str, String), String> {
    let endpoints = ENDPOINTS.lock().unwrap_or_else(|p| p.into_inner());
    let started: Vec<(&'static str, String)> =
        endpoints.values().filter_map(|(variable, endpoint)| Some(((*variable)?, endpoint.clone()?))).collect();
    match &started[..] {
        [one] => Ok(one.clone()),
        [] => Err("no other process can reach this cell's broker: it lives inside this test binary, and only a \
                   broker with an endpoint can be shared by two consumer processes"
            .to_owned()),
        several => Err(format!("this binary started {} brokers; a peer needs to be told one", several.len())),
    }
}

/// Runs `test` (its path in this binary) in another process as a peer that receives `id` on
/// the cell named `unique`, each time within `arrival`, and releases it `releases` times;
/// returns the handled counts the peer was presented, in order. Panics with the peer's output
/// when it fails.
pub fn release_elsewhere(test: &str, unique: &str, id: &str, releases: u32, arrival: Duration) -> Vec<u32> {
    let (variable, endpoint) = shared_broker().unwrap_or_else(|problem| panic!("{problem}"));
    let request = Request { unique: unique.to_owned(), id: id.to_owned(), releases, arrival };
    let executable = std::env::current_exe().expect("the test binary's path");
    // The path within the binary: module_path!() starts with the binary's crate name.
    let test = test.split_once("::").map_or(test, |(_, path)| path);
    let output = Command::new(executable)
        .args([test, "--exact", "--nocapture", "--include-ignored", "--test-threads", "2"])
        .env(VARIABLE, request.encode())
        .env(contract::BrokerSource::VARIABLE, "env")
        .env(variable, &endpoint)
        // A peer is a client only: which implementation a local broker runs is this binary's.
        .envs(contract::Implementation::REFERENCES.map(|reference| (reference.variable(), "")))
        .env_remove(crate::fault::VARIABLE)
        // What a client from the environment needs of AWS when this binary's broker is local.
        .env("AWS_ACCESS_KEY_ID", std::env::var("AWS_ACCESS_KEY_ID").unwrap_or_else(|_| "conformance".into()))
        .env("AWS_SECRET_ACCESS_KEY", std::env::var("AWS_SECRET_ACCESS_KEY").unwrap_or_else(|_| "conformance".into()))
        .env("AWS_REGION", std::env::var("AWS_REGION").unwrap_or_else(|_| "us-east-1".into()))
        .output()
        .expect("starting the peer process");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let report = stdout.lines().find_map(|line| line.strip_prefix(REPORT));
    match (output.status.success(), report) {
        (true, Some(counts)) => counts.split(',').map(|c| c.parse().expect("the peer reports numbers")).collect(),
        _ => {
            // Indented, so no line of the peer's passes for one of this binary's own.
            let all = format!("{stdout}{}", String::from_utf8_lossy(&output.stderr));
            let shown: Vec<String> = all.lines().map(|line| format!("    | {line}")).collect();
            panic!(
                "the peer process ({variable}={}) did not release {id} {releases} times ({}):\n{}",
                gateway::endpoint::without_credentials(&endpoint),
                output.status,
                shown.join("\n")
            )
        }
    }
}

/// The peer's work on `channel`: receive `request.id` and release it, `request.releases` times,
/// then report and end the process (its channel and connection with it), before the test body
/// that started it could go on as a cell.
pub(crate) async fn serve(channel: &dyn Channel, request: &Request) -> ! {
    let mut presented = Vec::new();
    for _ in 0..request.releases {
        let message = receive(channel, &request.id, request.arrival).await;
        presented.push(message.header.handled_count.to_string());
        channel.nack(&message).await.unwrap_or_else(|e| panic!("the peer's nack of {} failed: {e}", request.id));
    }
    let _ = channel.close().await;
    println!("{REPORT}{}", presented.join(","));
    std::process::exit(0)
}

async fn receive(channel: &dyn Channel, id: &str, arrival: Duration) -> gateway::Message {
    let deadline = tokio::time::Instant::now() + arrival;
    while tokio::time::Instant::now() < deadline {
        match channel.receive(crate::POLL_INTERVAL).await {
            Ok(Some(message)) if message.id() == id => return message,
            Ok(Some(stray)) => {
                let _ = channel.nack(&stray).await;
            }
            Ok(None) => {}
            Err(error) => panic!("the peer's receive on {} failed: {error}", channel.name()),
        }
    }
    panic!("{id} did not arrive at the peer on {} within {arrival:?}", channel.name())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip_and_bad_ones_name_the_form() {
        let request = Request {
            unique: "sqs-dc-4-reactor-1a2b3c4d".into(),
            id: "m-1".into(),
            releases: 2,
            arrival: Duration::from_millis(10_500),
        };
        assert_eq!(Request::decode(&request.encode()), Ok(request));
        let error = Request::decode("a\tb").unwrap_err();
        assert!(error.contains("expected <unique cell name>"), "{error}");
        let error = Request::decode("a\tb\ttwo\t10").unwrap_err();
        assert!(error.contains("releases \"two\""), "{error}");
        let error = Request::decode("a\tb\t1\tsoon").unwrap_err();
        assert!(error.contains("arrival ms \"soon\""), "{error}");
    }
}
