//! Which records a channel holds and how far its group may commit. Kafka acknowledges by
//! committing an offset, which settles every earlier record of the partition too: a channel
//! holding records 0 and 1 that acknowledges record 2 must not commit past 2, or 0 and 1 are
//! lost when the channel closes. So a settled record is committed only once every record below
//! it in its partition is settled, and a record fetched again after a seek back (a nack) is
//! handed out only if it is neither held nor already settled.

use std::collections::{BTreeMap, BTreeSet};

/// One channel's records, by partition.
#[derive(Debug, Default)]
pub(super) struct Offsets {
    partitions: BTreeMap<i32, Partition>,
}

#[derive(Debug, Default)]
struct Partition {
    /// Fetched and not settled: held by the caller, or released (sought back) to be fetched again.
    pending: BTreeSet<i64>,
    /// Of `pending`, the records handed out and not yet settled or released.
    held: BTreeSet<i64>,
    /// Settled and not yet committed past (a lower record is pending).
    settled: BTreeSet<i64>,
    /// The offset the group has committed (the next record to read after a rebalance).
    committed: i64,
}

impl Offsets {
    /// A fetched record: `true` if it is to be handed out, `false` if it is held already or was
    /// settled (a seek back to an earlier record fetches it again).
    pub(super) fn fetched(&mut self, partition: i32, offset: i64) -> bool {
        let p = self.partitions.entry(partition).or_default();
        if p.held.contains(&offset) || p.settled.contains(&offset) || offset < p.committed {
            return false;
        }
        p.pending.insert(offset);
        p.held.insert(offset);
        true
    }

    /// Takes a held record out of the caller's hands; `false` if it is not held. A record taken
    /// and not settled (released: sought back) stays pending, holding the commit back, until it
    /// is fetched and settled.
    pub(super) fn take(&mut self, partition: i32, offset: i64) -> bool {
        self.partitions.get_mut(&partition).is_some_and(|p| p.held.remove(&offset))
    }

    /// A taken record is settled; returns the offset to commit, if the commit may move: the
    /// lowest pending record, or past the highest settled when none is pending.
    pub(super) fn settled(&mut self, partition: i32, offset: i64) -> Option<i64> {
        let p = self.partitions.entry(partition).or_default();
        p.pending.remove(&offset);
        p.settled.insert(offset);
        let settled_to = match p.pending.first() {
            Some(&lowest) => lowest,
            None => p.settled.last().map_or(p.committed, |highest| highest + 1),
        };
        if settled_to <= p.committed {
            return None;
        }
        p.committed = settled_to;
        p.settled = p.settled.split_off(&settled_to);
        Some(settled_to)
    }

    /// The channel closes: nothing is held any more; what was not committed is read again by the
    /// group's next member.
    pub(super) fn clear(&mut self) {
        self.partitions.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fetched(offsets: &mut Offsets, range: std::ops::Range<i64>) {
        for offset in range {
            assert!(offsets.fetched(0, offset), "{offset} is handed out");
        }
    }

    #[test]
    fn a_later_acknowledgement_does_not_commit_past_held_records() {
        let mut offsets = Offsets::default();
        fetched(&mut offsets, 0..3);
        assert!(offsets.take(0, 2));
        assert_eq!(offsets.settled(0, 2), None, "0 and 1 are held: nothing may be committed");
        assert!(offsets.take(0, 0));
        assert_eq!(offsets.settled(0, 0), Some(1), "up to 1, still held");
        assert!(offsets.take(0, 1));
        assert_eq!(offsets.settled(0, 1), Some(3), "past 2, settled earlier");
    }

    #[test]
    fn a_seek_back_hands_out_only_what_is_neither_held_nor_settled() {
        let mut offsets = Offsets::default();
        fetched(&mut offsets, 0..3);
        assert!(offsets.take(0, 2));
        assert_eq!(offsets.settled(0, 2), None);
        assert!(offsets.take(0, 0));
        // The seek back to 0 fetches 0, 1 and 2 again: only 0 is handed out.
        assert!(offsets.fetched(0, 0));
        assert!(!offsets.fetched(0, 1), "1 is still held");
        assert!(!offsets.fetched(0, 2), "2 was settled");
        assert!(offsets.fetched(0, 3));
    }

    #[test]
    fn a_released_record_holds_the_commit_back() {
        let mut offsets = Offsets::default();
        fetched(&mut offsets, 0..2);
        assert!(offsets.take(0, 0));
        assert!(offsets.take(0, 1));
        assert_eq!(offsets.settled(0, 1), None, "0 is pending, released");
        assert!(!offsets.take(0, 0), "a released record is not held");
    }

    #[test]
    fn partitions_are_apart_and_committed_records_are_not_handed_out_again() {
        let mut offsets = Offsets::default();
        assert!(offsets.fetched(1, 5));
        assert!(offsets.take(1, 5));
        assert_eq!(offsets.settled(1, 5), Some(6));
        assert!(!offsets.fetched(1, 5));
        assert!(offsets.fetched(0, 5));
        assert!(!offsets.take(2, 0));
    }
}
