//! Producers: straight to an SQS queue, or to an SNS topic that feeds queues.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_sqs::types::MessageAttributeValue;

use super::{broker_error, send_error, DEDUPLICATION_ID_KEY, MAX_DELAY_SECONDS};
use crate::channel::Producer;
use crate::error::{ChannelError, ErrorKind};
use crate::message::Message;
use crate::runtime::GatewayRuntime;
use crate::transport::attributes::header_attributes;
use crate::transport::kit;

type SendError = Box<dyn std::error::Error + Send + Sync>;

fn text_body(message: &Message) -> Result<String, SendError> {
    String::from_utf8(message.body.bytes.clone())
        .map_err(|_| format!("message {}: SQS and SNS bodies are text and this body is not UTF-8", message.id()).into())
}

/// A FIFO message's group (the partition key) and deduplication id: the bag's, else the
/// message id. Never the body: content-based deduplication would silently drop a second,
/// different message that happens to carry the same body within five minutes.
fn group_and_deduplication(message: &Message) -> (String, String) {
    let group = message.header.partition_key.clone().unwrap_or_else(|| "default".to_owned());
    let deduplication = match message.header.bag.get(DEDUPLICATION_ID_KEY) {
        Some(id) => id.to_string(),
        None => message.header.id.clone(),
    };
    (group, deduplication)
}

/// Sends a message to a queue by URL: used by the producer and by rejection routing.
pub(super) async fn send_to_queue(
    runtime: &GatewayRuntime,
    client: &aws_sdk_sqs::Client,
    url: &str,
    message: &Message,
    delay_seconds: u64,
    fifo: bool,
) -> Result<(), SendError> {
    let mut request = client.send_message().queue_url(url).message_body(text_body(message)?);
    for (name, value) in header_attributes(message) {
        let attribute = MessageAttributeValue::builder().data_type("String").string_value(value).build()?;
        request = request.message_attributes(name, attribute);
    }
    if fifo {
        let (group, deduplication) = group_and_deduplication(message);
        request = request.message_group_id(group).message_deduplication_id(deduplication);
    } else if delay_seconds > 0 {
        request = request.delay_seconds(delay_seconds as i32);
    }
    runtime.call(request.send()).await?;
    Ok(())
}

/// Whole seconds, rounded up, within SQS's limit; a longer delay is an error, not a shorter wait.
fn delay_seconds(destination: &str, delay: Duration, fifo: bool) -> Result<u64, ChannelError> {
    let seconds = kit::whole_seconds(delay);
    let refuse = |why: String| ChannelError::broker(destination, "send with delay", ErrorKind::Unsupported, why);
    if fifo && seconds > 0 {
        return Err(refuse(
            "SQS FIFO queues take no per-message delay (DelaySeconds); set the queue's delay instead".into(),
        ));
    }
    if seconds > MAX_DELAY_SECONDS {
        return Err(refuse(format!(
            "a delay of {seconds} s exceeds SQS's maximum DelaySeconds of {MAX_DELAY_SECONDS} s"
        )));
    }
    Ok(seconds)
}

/// Publishes to the SQS queue named by the message's topic (a FIFO queue's name ends `.fifo`).
#[derive(Debug)]
pub struct SqsProducer {
    client: aws_sdk_sqs::Client,
    runtime: GatewayRuntime,
    urls: Mutex<HashMap<String, String>>,
}

impl SqsProducer {
    pub fn new(client: aws_sdk_sqs::Client, runtime: GatewayRuntime) -> SqsProducer {
        SqsProducer { client, runtime, urls: Mutex::default() }
    }

    async fn url(&self, queue: &str) -> Result<String, ChannelError> {
        if let Some(url) = self.urls.lock().unwrap_or_else(|p| p.into_inner()).get(queue) {
            return Ok(url.clone());
        }
        let request = self.client.get_queue_url().queue_name(queue);
        let output = self.runtime.call(request.send()).await.map_err(|e| broker_error(queue, "send", e))?;
        let url = output.queue_url.unwrap_or_default();
        self.urls.lock().unwrap_or_else(|p| p.into_inner()).insert(queue.to_owned(), url.clone());
        Ok(url)
    }
}

#[async_trait]
impl Producer for SqsProducer {
    async fn send(&self, message: &Message) -> Result<(), ChannelError> {
        self.send_with_delay(message, Duration::ZERO).await
    }

    async fn send_with_delay(&self, message: &Message, delay: Duration) -> Result<(), ChannelError> {
        let queue = &message.header.topic;
        let fifo = queue.ends_with(".fifo");
        let seconds = delay_seconds(queue, delay, fifo)?;
        let url = self.url(queue).await?;
        send_to_queue(&self.runtime, &self.client, &url, message, seconds, fifo)
            .await
            .map_err(|e| send_error(queue, "send", e))
    }
}

/// Publishes to the SNS topic named by the message's topic. SNS has no per-message delay.
#[derive(Debug)]
pub struct SnsProducer {
    client: aws_sdk_sns::Client,
    runtime: GatewayRuntime,
    arns: Mutex<HashMap<String, String>>,
}

impl SnsProducer {
    pub fn new(client: aws_sdk_sns::Client, runtime: GatewayRuntime) -> SnsProducer {
        SnsProducer { client, runtime, arns: Mutex::default() }
    }

    /// CreateTopic is idempotent and answers the ARN: the cheapest lookup by name.
    async fn arn(&self, topic: &str) -> Result<String, ChannelError> {
        if let Some(arn) = self.arns.lock().unwrap_or_else(|p| p.into_inner()).get(topic) {
            return Ok(arn.clone());
        }
        let mut request = self.client.create_topic().name(topic);
        if topic.ends_with(".fifo") {
            request = request.attributes("FifoTopic", "true").attributes("ContentBasedDeduplication", "true");
        }
        let output = self.runtime.call(request.send()).await.map_err(|e| broker_error(topic, "send", e))?;
        let arn = output.topic_arn.unwrap_or_default();
        self.arns.lock().unwrap_or_else(|p| p.into_inner()).insert(topic.to_owned(), arn.clone());
        Ok(arn)
    }
}

#[async_trait]
impl Producer for SnsProducer {
    async fn send(&self, message: &Message) -> Result<(), ChannelError> {
        let topic = &message.header.topic;
        let arn = self.arn(topic).await?;
        let failed = |e: SendError| send_error(topic, "send", e);
        let mut request = self.client.publish().topic_arn(arn).message(text_body(message).map_err(failed)?);
        for (name, value) in header_attributes(message) {
            let attribute = aws_sdk_sns::types::MessageAttributeValue::builder()
                .data_type("String")
                .string_value(value)
                .build()
                .map_err(|e| failed(e.into()))?;
            request = request.message_attributes(name, attribute);
        }
        if topic.ends_with(".fifo") {
            let (group, deduplication) = group_and_deduplication(message);
            request = request.message_group_id(group).message_deduplication_id(deduplication);
        }
        self.runtime.call(request.send()).await.map_err(|e| broker_error(topic, "send", e))?;
        Ok(())
    }

    async fn send_with_delay(&self, message: &Message, delay: Duration) -> Result<(), ChannelError> {
        kit::refuse_delay(message, delay, "SNS has no per-message delay")?;
        self.send(message).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::MessageType;

    #[test]
    fn fifo_deduplication_is_the_bags_id_else_the_message_id_never_the_body() {
        let first = Message::new("q.fifo", MessageType::Event, "same body");
        let second = Message::new("q.fifo", MessageType::Event, "same body");
        assert_ne!(group_and_deduplication(&first).1, group_and_deduplication(&second).1);
        let mut chosen = first.clone();
        chosen.header.partition_key = Some("orders-42".into());
        chosen.header.bag.insert(DEDUPLICATION_ID_KEY.into(), "order-42-v1".into());
        assert_eq!(group_and_deduplication(&chosen), ("orders-42".to_owned(), "order-42-v1".to_owned()));
    }

    #[test]
    fn delays_round_up_and_limits_are_refused_with_the_reason() {
        assert_eq!(delay_seconds("q", Duration::from_millis(1500), false).unwrap(), 2);
        assert_eq!(delay_seconds("q", Duration::ZERO, true).unwrap(), 0);
        let too_long = delay_seconds("q", Duration::from_secs(901), false).unwrap_err().to_string();
        assert!(too_long.contains("exceeds SQS's maximum DelaySeconds of 900 s"), "{too_long}");
        let fifo = delay_seconds("q.fifo", Duration::from_secs(1), true).unwrap_err().to_string();
        assert!(fifo.contains("FIFO queues take no per-message delay"), "{fifo}");
    }
}
