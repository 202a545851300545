//! Connections, subscriptions and channel creation per make-channels mode.

use std::time::Duration;

use aws_sdk_sqs::types::QueueAttributeName;

use super::channel::{Envelope, SqsChannel};
use super::producer::{SnsProducer, SqsProducer};
use super::{broker_error, MAX_WAIT_SECONDS};
use crate::budget::{self, DeliveryCounting};
use crate::error::{ChannelError, ErrorKind};
use crate::runtime::GatewayRuntime;
use crate::subscription::{MakeChannels, Subscription};

/// SQS and SNS clients for one account and endpoint.
#[derive(Debug, Clone)]
pub struct SqsConnection {
    sqs: aws_sdk_sqs::Client,
    sns: aws_sdk_sns::Client,
    runtime: GatewayRuntime,
}

/// A subscription read through SQS.
#[derive(Debug, Clone)]
pub struct SqsSubscription {
    pub subscription: Subscription,
    /// The SNS topic that feeds the queue (non-raw envelope); `None` reads the queue directly.
    pub topic: Option<String>,
    /// FIFO queue (and topic): names end with `.fifo`.
    pub fifo: bool,
    /// The RedrivePolicy maxReceiveCount (M) set on the queue when this subscription creates it.
    pub redrive_limit: Option<u32>,
    pub visibility_timeout: Duration,
}

impl SqsSubscription {
    pub fn new(subscription: Subscription) -> SqsSubscription {
        SqsSubscription {
            subscription,
            topic: None,
            fifo: false,
            redrive_limit: None,
            visibility_timeout: Duration::from_secs(30),
        }
    }
}

impl DeliveryCounting for SqsSubscription {
    /// Only a policy the project created is visible to it (ADR 0077, R-10).
    fn native_redrive_limit(&self) -> Option<u32> {
        let created = self.subscription.make_channels == MakeChannels::Create;
        let has_destination = self.subscription.dead_letter_routing_key.is_some();
        self.redrive_limit.filter(|_| created && has_destination)
    }

    /// ApproximateReceiveCount is always returned: an SQS budget is always enforceable.
    fn unenforceable_reason(&self) -> Option<String> {
        None
    }
}

/// How long a call (its retries included) waits for SQS or SNS before it fails as a `Timeout`, on
/// the connections the gateway configures (`from_environment`, `local`): the longest receive
/// long-polls 20 s, and a service that stops answering must not hold a pump for ever. The AWS SDK
/// sets no such deadline by default; a caller passing its own clients to `new` sets its own
/// (`timeout_config`).
pub const CALL_DEADLINE: Duration = Duration::from_secs(MAX_WAIT_SECONDS + 10);

fn deadline(call_deadline: Duration) -> aws_sdk_sqs::config::timeout::TimeoutConfig {
    aws_sdk_sqs::config::timeout::TimeoutConfig::builder().operation_timeout(call_deadline).build()
}

impl SqsConnection {
    /// Calls run on the shared gateway runtime; `with_runtime` gives them the caller's.
    pub fn new(sqs: aws_sdk_sqs::Client, sns: aws_sdk_sns::Client) -> SqsConnection {
        SqsConnection { sqs, sns, runtime: GatewayRuntime::shared() }
    }

    /// Runs this connection's calls, and those of every channel and producer made from it, on
    /// `runtime`.
    pub fn with_runtime(self, runtime: GatewayRuntime) -> SqsConnection {
        SqsConnection { runtime, ..self }
    }

    /// From the environment's AWS configuration (credentials, region, `AWS_ENDPOINT_URL`), each
    /// call bounded by [`CALL_DEADLINE`].
    pub async fn from_environment() -> SqsConnection {
        let loading =
            aws_config::defaults(aws_config::BehaviorVersion::latest()).timeout_config(deadline(CALL_DEADLINE));
        let config = GatewayRuntime::shared().call(loading.load()).await;
        SqsConnection::new(aws_sdk_sqs::Client::new(&config), aws_sdk_sns::Client::new(&config))
    }

    /// A local emulator (moto, LocalStack) at `endpoint`, with fixed test credentials, each call
    /// bounded by [`CALL_DEADLINE`].
    pub fn local(endpoint: &str) -> SqsConnection {
        SqsConnection::local_with_deadline(endpoint, CALL_DEADLINE)
    }

    /// As [`SqsConnection::local`], each call bounded by `call_deadline`.
    pub fn local_with_deadline(endpoint: &str, call_deadline: Duration) -> SqsConnection {
        let credentials = aws_sdk_sqs::config::Credentials::new("test", "test", None, None, "local-emulator");
        let region = aws_sdk_sqs::config::Region::new("us-east-1");
        let behaviour = aws_sdk_sqs::config::BehaviorVersion::latest();
        let sqs = aws_sdk_sqs::Config::builder()
            .behavior_version(behaviour)
            .endpoint_url(endpoint)
            .region(region.clone())
            .credentials_provider(credentials.clone())
            .timeout_config(deadline(call_deadline))
            .build();
        let sns = aws_sdk_sns::Config::builder()
            .behavior_version(behaviour)
            .endpoint_url(endpoint)
            .region(region)
            .credentials_provider(credentials)
            .timeout_config(deadline(call_deadline))
            .build();
        SqsConnection::new(aws_sdk_sqs::Client::from_conf(sqs), aws_sdk_sns::Client::from_conf(sns))
    }

    pub fn sqs_producer(&self) -> SqsProducer {
        SqsProducer::new(self.sqs.clone(), self.runtime.clone())
    }

    pub fn sns_producer(&self) -> SnsProducer {
        SnsProducer::new(self.sns.clone(), self.runtime.clone())
    }

    pub fn sqs_client(&self) -> &aws_sdk_sqs::Client {
        &self.sqs
    }

    /// The consumer channel of a subscription: creates or checks its queues (and topic) per
    /// the make-channels mode, then logs R-11 once if the budget cannot be enforced.
    pub async fn channel(&self, subscription: &SqsSubscription) -> Result<SqsChannel, ChannelError> {
        let common = &subscription.subscription;
        let mode = common.make_channels;
        let dead_letter_url = match &common.dead_letter_routing_key {
            Some(name) => Some(self.queue(name, subscription, mode, None).await?),
            None => None,
        };
        let invalid_url = match &common.invalid_message_routing_key {
            Some(name) => Some(self.queue(name, subscription, mode, None).await?),
            None => None,
        };
        let redrive = match (&dead_letter_url, subscription.native_redrive_limit()) {
            (Some(url), Some(limit)) => Some((self.queue_arn(url).await?, limit)),
            _ => None,
        };
        let queue_url = self.queue(&common.routing_key, subscription, mode, redrive).await?;
        if let (Some(topic), MakeChannels::Create) = (&subscription.topic, mode) {
            self.subscribe(topic, &queue_url, subscription.fifo).await?;
        }
        budget::warn_if_unenforceable(common, subscription);
        Ok(SqsChannel {
            client: self.sqs.clone(),
            runtime: self.runtime.clone(),
            queue_url,
            dead_letter_url,
            invalid_url,
            subscription: common.clone(),
            envelope: if subscription.topic.is_some() { Envelope::Sns } else { Envelope::Raw },
            fifo: subscription.fifo,
            warnings: std::sync::Arc::new(crate::transport::attributes::ReaderWarnings::new(&common.routing_key)),
            counting: budget::CountingReport::of(subscription),
        })
    }

    /// A reader of a queue that receives raw messages (a dead-letter or invalid-message queue).
    pub async fn reader(&self, queue: &str, fifo: bool) -> Result<SqsChannel, ChannelError> {
        let mut subscription =
            SqsSubscription::new(Subscription::new(queue, queue).with_make_channels(MakeChannels::Validate));
        subscription.fifo = fifo;
        self.channel(&subscription).await
    }

    async fn queue(
        &self,
        name: &str,
        subscription: &SqsSubscription,
        mode: MakeChannels,
        redrive: Option<(String, u32)>,
    ) -> Result<String, ChannelError> {
        if mode != MakeChannels::Create {
            // SQS addresses queues by URL: resolving it is a read, made in Assume mode too.
            let request = self.sqs.get_queue_url().queue_name(name);
            // Only the service saying the queue does not exist makes it Missing: a lookup that
            // timed out or was refused says nothing about the queue.
            return match self.runtime.call(request.send()).await {
                Ok(output) => Ok(output.queue_url.unwrap_or_default()),
                Err(error) => {
                    let absent = error.as_service_error().is_some_and(|e| e.is_queue_does_not_exist());
                    let error = broker_error(name, "look up queue", error);
                    if absent || error.kind() == Some(ErrorKind::NotFound) {
                        Err(ChannelError::Missing { channel: name.to_owned() })
                    } else {
                        Err(error)
                    }
                }
            };
        }
        let visibility = subscription.visibility_timeout.as_secs().to_string();
        let mut request =
            self.sqs.create_queue().queue_name(name).attributes(QueueAttributeName::VisibilityTimeout, visibility);
        if subscription.fifo {
            request = request
                .attributes(QueueAttributeName::FifoQueue, "true")
                .attributes(QueueAttributeName::ContentBasedDeduplication, "true");
        }
        if let Some((arn, limit)) = redrive {
            let policy = serde_json::json!({ "deadLetterTargetArn": arn, "maxReceiveCount": limit }).to_string();
            request = request.attributes(QueueAttributeName::RedrivePolicy, policy);
        }
        let output = self.runtime.call(request.send()).await.map_err(|e| broker_error(name, "create queue", e))?;
        Ok(output.queue_url.unwrap_or_default())
    }

    async fn queue_arn(&self, url: &str) -> Result<String, ChannelError> {
        let request = self.sqs.get_queue_attributes().queue_url(url).attribute_names(QueueAttributeName::QueueArn);
        let output = self.runtime.call(request.send()).await.map_err(|e| broker_error(url, "read queue ARN", e))?;
        output.attributes.and_then(|attributes| attributes.get(&QueueAttributeName::QueueArn).cloned()).ok_or_else(
            || ChannelError::broker(url, "read queue ARN", ErrorKind::Malformed, "the answer has no QueueArn"),
        )
    }

    async fn subscribe(&self, topic: &str, queue_url: &str, fifo: bool) -> Result<(), ChannelError> {
        let mut request = self.sns.create_topic().name(topic);
        if fifo {
            request = request.attributes("FifoTopic", "true").attributes("ContentBasedDeduplication", "true");
        }
        let topic_arn = self
            .runtime
            .call(request.send())
            .await
            .map_err(|e| broker_error(topic, "create topic", e))?
            .topic_arn
            .unwrap_or_default();
        let queue_arn = self.queue_arn(queue_url).await?;
        let request = self
            .sns
            .subscribe()
            .topic_arn(topic_arn)
            .protocol("sqs")
            .endpoint(queue_arn)
            .attributes("RawMessageDelivery", "false");
        self.runtime.call(request.send()).await.map_err(|e| broker_error(topic, "subscribe", e))?;
        Ok(())
    }

    /// Deletes queues and a topic by name, ignoring ones already gone: test teardown.
    pub async fn delete(&self, queues: &[String], topic: Option<&str>) {
        for queue in queues {
            if let Ok(output) = self.runtime.call(self.sqs.get_queue_url().queue_name(queue).send()).await {
                let url = output.queue_url.unwrap_or_default();
                let _ = self.runtime.call(self.sqs.delete_queue().queue_url(url).send()).await;
            }
        }
        if let Some(topic) = topic {
            if let Ok(output) = self.runtime.call(self.sns.create_topic().name(topic).send()).await {
                let arn = output.topic_arn.unwrap_or_default();
                let _ = self.runtime.call(self.sns.delete_topic().topic_arn(arn).send()).await;
            }
        }
    }
}
