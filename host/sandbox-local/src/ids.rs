//! Per-sandbox identities on the host: the range of host uids and gids that a sandbox's users
//! map to (its user namespace).
//!
//! Each live sandbox holds a slot, so no two live sandboxes share a uid range (a process
//! escaping one could otherwise signal or read another's files and processes).

/// Host ids of slot 0's range start here: far above any real account, below 2^31 (some tools
/// treat ids as signed).
const ID_BASE: u32 = 0x1000_0000;
/// Ids per sandbox: 0..65535 inside, as in a container.
pub const ID_RANGE: u32 = 65_536;
/// Slots available: the ranges end at 0x5000_0000.
pub const MAX_SLOTS: u32 = 16_384;

/// The first host id of the slot's range (what root in the sandbox is on the host).
pub fn host_id_base(slot: u32) -> u32 {
    ID_BASE + slot * ID_RANGE
}

/// The loop device of the slot's disk (above the few a host uses for itself).
pub fn loop_index(slot: u32) -> u32 {
    1024 + slot
}

/// The lowest slot not in `taken`.
pub fn free_slot(taken: &std::collections::HashSet<u32>) -> Option<u32> {
    (0..MAX_SLOTS).find(|s| !taken.contains(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_map_to_disjoint_ranges_below_two_to_the_31() {
        assert_eq!(host_id_base(1) - host_id_base(0), ID_RANGE);
        assert!(u64::from(host_id_base(MAX_SLOTS - 1)) + u64::from(ID_RANGE) <= 1 << 31);
        let taken = [0, 1, 3].into_iter().collect();
        assert_eq!(free_slot(&taken), Some(2));
    }
}
