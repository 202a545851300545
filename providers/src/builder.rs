//! The one cell builder. Every configuration builds its cells the same way: unique names, the
//! subscription (budget and rejection destinations), the cell's channel, a reader of each
//! rejection destination, the producer, the teardown and the message assertion. [`build`] does
//! that once; a configuration implements [`CellBroker`] for what only its broker knows (how names
//! map to its queues or topics, how a channel, a reader and a producer are made, what to delete),
//! and is a [`Provider`] through it.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use gateway::{Channel, ChannelError, MakeChannels, Producer, Subscription};

use crate::assertion::{FullHeader, MessageAssertion};
use crate::ceiling::{step, Watched};
use crate::cell::{Ceilings, Cell, CellParts, CellSpec, Successor, Teardown};
use crate::Provider;

/// A cell's names, derived by its broker from the cell's unique name.
#[derive(Debug, Clone)]
pub struct CellNames {
    /// The subscription's name (a queue's, a Pub/Sub subscription's, a RocketMQ consumer group's).
    pub subscription: String,
    /// What the subscription consumes from: a queue or a topic.
    pub routing_key: String,
    /// Where the cell's producer publishes: the routing key, or a topic feeding it.
    pub publish_topic: String,
    /// Ends every rejection destination's name (`.fifo` on SQS FIFO queues).
    pub suffix: &'static str,
}

impl CellNames {
    /// A subscription named `subscription` on `routing_key`, published to directly.
    pub fn new(subscription: impl Into<String>, routing_key: impl Into<String>) -> CellNames {
        let routing_key = routing_key.into();
        CellNames { subscription: subscription.into(), publish_topic: routing_key.clone(), routing_key, suffix: "" }
    }
}

/// A cell before its broker creates anything: what the behaviour asks for, the names, and the
/// subscription with its budget and rejection destinations (`<unique>-dlq<suffix>`,
/// `<unique>-invalid<suffix>`).
#[derive(Debug, Clone)]
pub struct CellPlan {
    pub spec: CellSpec,
    pub names: CellNames,
    pub subscription: Subscription,
}

/// What a configuration's broker does for a cell; [`build`] does the rest.
#[async_trait]
pub trait CellBroker: Send + Sync {
    /// What the cell created on the broker, collected for its teardown (`()` when nothing is
    /// deleted: the broker's store is the test binary's own).
    type Created: Default + Send;

    /// The configuration name in the manifest and the ledger; the first part of every name.
    fn configuration(&self) -> &'static str;

    /// The cell's names, from `unique` (the cell's [`CellSpec::unique_name`]).
    fn names(&self, unique: &str) -> CellNames;

    /// The lease every cell's channel gets: the manifest's `lease_ms` (none: the broker has
    /// none, or it is not this provider's to set). A provider sets it from [`crate::lease`];
    /// one that overrides this sets a lease of its own, which [`build`] refuses.
    fn lease(&self) -> Option<Duration> {
        crate::lease::of(self.configuration())
    }

    /// [`CellBroker::lease`], for a provider that sets a lease on every channel it makes.
    fn required_lease(&self) -> Duration {
        self.lease().unwrap_or_else(|| panic!("templates/manifest.yaml gives {} no lease_ms", self.configuration()))
    }

    /// The cell's channel on `plan.subscription`, with the cells' lease.
    async fn channel(&self, plan: &CellPlan, created: &mut Self::Created) -> Arc<dyn Channel>;

    /// Another channel on `plan.subscription` (which exists already), or why the transport
    /// refuses one while a channel of it is open; only such a transport overrides this.
    async fn try_channel(&self, plan: &CellPlan) -> Result<Arc<dyn Channel>, ChannelError> {
        Ok(self.channel(plan, &mut Self::Created::default()).await)
    }

    /// A reader of the rejection destination `destination` (see [`reader_subscription`]).
    async fn reader(&self, destination: &str, created: &mut Self::Created) -> Arc<dyn Channel>;

    /// The cell's producer, publishing to `plan.names.publish_topic`.
    fn producer(&self, plan: &CellPlan) -> Arc<dyn Producer>;

    /// How long a cell waits for an arrival and for a routed copy ([`Ceilings`]).
    fn ceilings(&self) -> Ceilings {
        Ceilings::BROKER
    }

    /// What must survive a round trip through the broker.
    fn assertion(&self) -> Arc<dyn MessageAssertion> {
        Arc::new(FullHeader)
    }

    /// Deletes what the cell created; `None` leaves it on the broker.
    fn teardown(&self, created: Self::Created) -> Option<Box<dyn Teardown>> {
        drop(created);
        None
    }
}

/// The subscription that reads a rejection destination: `<destination>-reader` on it.
pub fn reader_subscription(destination: &str) -> Subscription {
    Subscription::new(format!("{destination}-reader"), destination)
}

/// Builds one cell on `broker`: names, subscription, channel, then the dead-letter and invalid
/// readers, producer, assertion, teardown and successor, in that order.
/// In a peer process (see [`crate::peer`]) it builds nothing: it serves the peer's request on
/// the requesting cell's subscription and ends the process.
pub async fn build<B: CellBroker + ?Sized>(broker: &'static B, spec: CellSpec) -> Cell {
    if let Some(request) = crate::peer::Request::from_environment() {
        let plan = plan(broker, spec, &request.unique);
        let channel = successor(broker, &plan)().await.unwrap_or_else(|e| panic!("the peer's channel: {e}"));
        crate::peer::serve(&*channel, &request).await
    }
    crate::fault::fail_first_attempt(&format!("{}-{}-{}", broker.configuration(), spec.behaviour, spec.variant));
    if let Some(declared) = spec.lease {
        // The cell was rendered with the manifest's lease, from which its bounds derive: a
        // provider with a lease of its own (or a stale generated tree) must not run it.
        assert_eq!(
            declared,
            broker.lease(),
            "{}: templates/manifest.yaml's lease_ms and the provider's lease differ; the cells' bounds \
             assume the manifest's",
            broker.configuration()
        );
    }
    let unique = spec.unique_name(broker.configuration());
    let _step = step(|| format!("building the cell {unique}: its queues or topics, channels and producer"));
    let plan = plan(broker, spec, &unique);
    let mut created = B::Created::default();
    // Watched: the ceiling names a hung call made on it by the test or its pump.
    let channel: Arc<dyn Channel> = Arc::new(Watched::new(broker.channel(&plan, &mut created).await));
    let dead_letter = match &plan.subscription.dead_letter_routing_key {
        Some(destination) => Some(broker.reader(destination, &mut created).await),
        None => None,
    };
    let invalid = match &plan.subscription.invalid_message_routing_key {
        Some(destination) => Some(broker.reader(destination, &mut created).await),
        None => None,
    };
    let producer = broker.producer(&plan);
    let successor = successor(broker, &plan);
    CellParts {
        unique,
        publish_topic: plan.names.publish_topic,
        subscription: plan.subscription,
        channel,
        producer,
        dead_letter,
        invalid,
        assertion: broker.assertion(),
        ceilings: broker.ceilings(),
        teardown: broker.teardown(created),
        successor,
    }
    .into()
}

/// The names and subscription of the cell named `unique`.
fn plan<B: CellBroker + ?Sized>(broker: &B, spec: CellSpec, unique: &str) -> CellPlan {
    let names = broker.names(unique);
    let mut subscription =
        Subscription::new(&names.subscription, &names.routing_key).with_requeue_count(spec.requeue_count);
    if spec.dead_letter {
        subscription = subscription.with_dead_letter(format!("{unique}-dlq{}", names.suffix));
    }
    if spec.invalid_channel {
        subscription = subscription.with_invalid_message(format!("{unique}-invalid{}", names.suffix));
    }
    CellPlan { spec, names, subscription }
}

/// A fresh channel on the plan's subscription, made as the cell's was but assuming what the cell
/// created (what a successor would create is the cell's, torn down with it).
fn successor<B: CellBroker + ?Sized>(broker: &'static B, plan: &CellPlan) -> Successor {
    let mut plan = plan.clone();
    plan.subscription = plan.subscription.with_make_channels(MakeChannels::Assume);
    Box::new(move || {
        let plan = plan.clone();
        Box::pin(async move {
            let channel = broker.try_channel(&plan).await?;
            Ok(Arc::new(Watched::new(channel)) as Arc<dyn Channel>)
        })
    })
}

/// Every cell broker is its configuration's provider.
#[async_trait]
impl<B: CellBroker + 'static> Provider for B {
    fn configuration(&self) -> &'static str {
        CellBroker::configuration(self)
    }

    async fn cell(&'static self, spec: CellSpec) -> Cell {
        build(self, spec).await
    }
}
