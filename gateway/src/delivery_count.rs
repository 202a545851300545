//! The delivery-count rule of ADR 0077: pure arithmetic plus one bag lookup. No I/O, no
//! allocation (it runs on every receive), identical for every transport.

use crate::message::Bag;
use crate::rejection::keys::REJECTION_REASON;

/// A broker counter whose first delivery is 1, presented so that a first delivery is 0:
/// 1, 2, 3 become 0, 1, 2; absent, 0 or negative become 0. Never negative.
pub const fn normalise(broker_count: Option<i64>) -> u32 {
    match broker_count {
        Some(count) if count > 1 => {
            let presented = count - 1;
            if presented > u32::MAX as i64 {
                u32::MAX
            } else {
                presented as u32
            }
        }
        _ => 0,
    }
}

/// The handled count a consumer presents. A routed rejection copy (its bag holds
/// `rejectionReason`) keeps its stamped count, never the destination's own counter; an
/// unavailable broker counter (absent, 0 or negative) keeps the header count; otherwise the
/// broker's counter, normalised.
pub fn resolve(header_count: u32, broker_count: Option<i64>, bag: &Bag) -> u32 {
    if header_decides(broker_count, bag) {
        header_count
    } else {
        normalise(broker_count)
    }
}

/// Whether `resolve` presents the header count: on a routed rejection copy, or when the broker
/// counter is unavailable. A reader needs to know, to refuse an unreadable header count then.
pub fn header_decides(broker_count: Option<i64>, bag: &Bag) -> bool {
    let broker_counted = matches!(broker_count, Some(count) if count >= 1);
    bag.contains_key(REJECTION_REASON) || !broker_counted
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::BagValue;
    use proptest::prelude::*;
    use rstest::rstest;

    // AC-33's table.
    #[rstest]
    #[case(None, 0)]
    #[case(Some(i64::MIN), 0)]
    #[case(Some(-1), 0)]
    #[case(Some(0), 0)]
    #[case(Some(1), 0)]
    #[case(Some(2), 1)]
    #[case(Some(3), 2)]
    #[case(Some(i64::from(u32::MAX) + 1), u32::MAX)]
    #[case(Some(i64::MAX), u32::MAX)]
    fn normalise_presents_a_first_delivery_as_zero(#[case] broker: Option<i64>, #[case] presented: u32) {
        assert_eq!(normalise(broker), presented);
    }

    fn routed_copy_bag() -> Bag {
        let mut bag = Bag::new();
        bag.insert(REJECTION_REASON.to_owned(), BagValue::from("DeliveryError"));
        bag
    }

    #[rstest]
    // An ordinary message: the broker counter wins over the header (edge case 5).
    #[case::first_delivery(0, Some(1), false, 0)]
    #[case::third_delivery(0, Some(3), false, 2)]
    #[case::header_carried_count_ignored(7, Some(1), false, 0)]
    // The broker counter is unavailable: today's behaviour, the header count.
    #[case::no_counter(4, None, false, 4)]
    #[case::zero_counter(4, Some(0), false, 4)]
    #[case::negative_counter(4, Some(-3), false, 4)]
    // A routed rejection copy keeps its stamp, whatever the DLQ's own counter says.
    #[case::routed_copy_first_dlq_read(3, Some(1), true, 3)]
    #[case::routed_copy_redelivered_in_dlq(3, Some(9), true, 3)]
    // A copy put back on its source with the metadata intact is still a routed copy (edge case 2).
    #[case::put_back_with_metadata(5, Some(1), true, 5)]
    fn resolve_chooses_the_count_source(
        #[case] header: u32,
        #[case] broker: Option<i64>,
        #[case] routed: bool,
        #[case] presented: u32,
    ) {
        let bag = if routed { routed_copy_bag() } else { Bag::new() };
        assert_eq!(resolve(header, broker, &bag), presented);
    }

    #[test]
    fn a_user_supplied_rejection_reason_is_treated_as_a_routed_copy() {
        // Edge case 3: the key is reserved; whatever its value, the stamp is kept.
        let mut bag = Bag::new();
        bag.insert(REJECTION_REASON.to_owned(), BagValue::from("my own value"));
        assert_eq!(resolve(2, Some(5), &bag), 2);
    }

    #[test]
    fn the_discriminator_is_case_sensitive() {
        // The pump's "RejectionReason" header is not the discriminator (ADR 0077).
        let mut bag = Bag::new();
        bag.insert("RejectionReason".to_owned(), BagValue::from("DeliveryError"));
        assert_eq!(resolve(2, Some(5), &bag), 4);
    }

    proptest! {
        #[test]
        fn normalise_is_never_negative_and_one_less_than_a_counted_delivery(broker in any::<Option<i64>>()) {
            let presented = normalise(broker);
            match broker {
                Some(count) if count >= 1 && count <= i64::from(u32::MAX) => prop_assert_eq!(i64::from(presented), count - 1),
                Some(count) if count > i64::from(u32::MAX) => prop_assert_eq!(presented, u32::MAX),
                _ => prop_assert_eq!(presented, 0),
            }
        }

        #[test]
        fn the_budget_fires_on_delivery_r_exactly_with_an_exact_counter(requeue_count in 1u32..50) {
            // ADR 0077 R-4: presented c(n) = n - 1; the pump increments to n and tests n >= R.
            let bag = Bag::new();
            let first_rejected = (1..=requeue_count)
                .find(|&delivery| resolve(0, Some(i64::from(delivery)), &bag) + 1 >= requeue_count);
            prop_assert_eq!(first_rejected, Some(requeue_count));
        }

        #[test]
        fn a_routed_copy_always_keeps_its_stamp(header in any::<u32>(), broker in any::<Option<i64>>()) {
            prop_assert_eq!(resolve(header, broker, &routed_copy_bag()), header);
        }
    }
}
