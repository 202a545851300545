//! A broker endpoint as it may be written out (errors, logs, failure messages): without the
//! credentials a URL can carry. An endpoint from the environment (`NATS_URL`, `DATABASE_URL`,
//! `AMQP_URL`) may hold a user and password or a token; they are never written out.

/// `endpoint` without the user and password or token before its host
/// (`nats://user:secret@host:4222` is written `nats://host:4222`).
pub fn without_credentials(endpoint: &str) -> String {
    let (scheme, rest) = endpoint.split_once("://").map_or(("", endpoint), |(scheme, rest)| (scheme, rest));
    let (authority, path) = rest.split_once('/').map_or((rest, None), |(authority, path)| (authority, Some(path)));
    let host = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
    let scheme = if scheme.is_empty() { String::new() } else { format!("{scheme}://") };
    let path = path.map(|path| format!("/{path}")).unwrap_or_default();
    format!("{scheme}{host}{path}")
}

#[cfg(test)]
mod tests {
    use super::without_credentials;

    #[test]
    fn an_endpoint_is_written_out_without_its_credentials() {
        assert_eq!(without_credentials("nats://user:secret@nats.example:4222"), "nats://nats.example:4222");
        assert_eq!(without_credentials("nats://token@127.0.0.1:4222"), "nats://127.0.0.1:4222");
        assert_eq!(without_credentials("postgres://app:pw@db:5432/queues"), "postgres://db:5432/queues");
        assert_eq!(without_credentials("user:secret@host:4222"), "host:4222");
    }

    #[test]
    fn an_endpoint_without_credentials_is_written_as_it_is() {
        assert_eq!(without_credentials("nats://127.0.0.1:4222"), "nats://127.0.0.1:4222");
        assert_eq!(without_credentials("127.0.0.1:9092"), "127.0.0.1:9092");
        assert_eq!(without_credentials("http://host:8085/path@x"), "http://host:8085/path@x");
    }
}
