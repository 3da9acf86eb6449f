//! Which of the eligible workers gets the next request.

/// The load of one eligible worker as the router sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Load {
    /// Requests this router has open on the worker right now: exact and never stale.
    pub(crate) outstanding: usize,
    /// Requests the worker last reported as queued plus running: it includes other routers' work.
    pub(crate) reported_depth: u32,
}

/// Picks the least loaded worker: fewest outstanding requests, then the shallowest reported queue;
/// ties rotate with `rotation` (a counter the caller advances per request) so that equal workers
/// share the work round-robin. Returns an index into `loads`, or `None` when it is empty.
pub(crate) fn least_loaded(loads: &[Load], rotation: usize) -> Option<usize> {
    let best = loads.iter().map(|load| (load.outstanding, load.reported_depth)).min()?;
    let tied: Vec<usize> = loads
        .iter()
        .enumerate()
        .filter(|(_, load)| (load.outstanding, load.reported_depth) == best)
        .map(|(index, _)| index)
        .collect();
    Some(tied[rotation % tied.len()])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(outstanding: usize, reported_depth: u32) -> Load {
        Load { outstanding, reported_depth }
    }

    #[test]
    fn nothing_to_pick_from_an_empty_list() {
        assert_eq!(least_loaded(&[], 0), None);
    }

    #[test]
    fn fewest_outstanding_wins_over_reported_depth() {
        assert_eq!(least_loaded(&[load(2, 0), load(1, 9), load(3, 0)], 0), Some(1));
    }

    #[test]
    fn reported_depth_breaks_ties() {
        assert_eq!(least_loaded(&[load(1, 4), load(1, 2), load(1, 3)], 0), Some(1));
    }

    #[test]
    fn equal_workers_take_turns() {
        let loads = [load(0, 0), load(5, 0), load(0, 0)];
        let picks: Vec<_> = (0..4).filter_map(|rotation| least_loaded(&loads, rotation)).collect();
        assert_eq!(picks, vec![0, 2, 0, 2]);
    }
}
