//! The torn-tail-or-corruption rule of FORMAT.md §6.3 as one pure function
//! per place a scan can stop: at a segment header that does not decode
//! ([`classify_bad_header`]) and where a segment's batches stop
//! ([`classify_stop`]). Each returns the *row* of the table that applies
//! (the first matching one, in the table's order), so recovery, `verify` and
//! `dump` reach the same verdict from the same facts; what each then does
//! about it (refuse, repair, report and resynchronise) is its own policy.
//!
//! Invariant 3 of ARCHITECTURE.md: only damage a power cut can explain (in
//! the last segment, after everything a completed fdatasync made durable)
//! is a torn tail; everything else is corruption.

use serde::Serialize;

use super::ProblemKind;

/// A row of the table in FORMAT.md §6.3.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Row {
    /// Header magic and CRC valid, another format version: unsupported.
    H1,
    /// Last segment, interrupted creation: torn tail (the whole file).
    H2,
    /// First segment, store id unknown, header unreadable: not a store.
    H3,
    /// Any other bad or mismatched segment header: corruption at offset 0.
    H4,
    /// A segment id missing between two present ones: corruption.
    H5,
    /// The scan stopped at the end of data with only zeros after it.
    Ok,
    /// Last segment: an invalid batch (uncertain), no later batch: torn tail.
    T1,
    /// Last segment: end of data, non-zero bytes after it, no later batch.
    T2,
    /// A later valid batch exists after the stop: corruption.
    C1,
    /// A checksum-valid batch is malformed (certain): corruption.
    C2,
    /// Damage in a sealed segment: corruption.
    C3,
    /// An intact checkpoint of this store proves the region durable.
    C4,
}

impl Row {
    /// The kind of damage, if the row is damage a store can carry on past
    /// (H1 and H3 refuse in every mode; OK is none).
    pub fn kind(self) -> Option<ProblemKind> {
        match self {
            Row::H2 | Row::T1 | Row::T2 => Some(ProblemKind::TornTail),
            Row::H4 | Row::H5 | Row::C1 | Row::C2 | Row::C3 | Row::C4 => {
                Some(ProblemKind::Corruption)
            }
            Row::H1 | Row::H3 | Row::Ok => None,
        }
    }
}

/// What a scan saw where a segment's batches stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StopFacts {
    /// No later segment exists.
    pub last_segment: bool,
    /// The scan stopped at a batch that is not valid (`None`: at the end of
    /// data). `Some(true)`: invalid by a *certain* condition (§3 (9), (10)).
    pub failure: Option<bool>,
    /// A later valid batch exists after the stop (§6.3).
    pub later_batch: bool,
    /// Non-zero bytes lie at or after the stop.
    pub nonzero_after: bool,
    /// An intact checkpoint of this store covers the log past the stop.
    pub checkpoint_covers: bool,
}

/// The row of §6.3 for a stop in a segment's batches.
pub fn classify_stop(f: &StopFacts) -> Row {
    if f.failure == Some(true) {
        Row::C2
    } else if f.later_batch {
        Row::C1
    } else if f.checkpoint_covers {
        Row::C4
    } else if !f.last_segment && (f.failure.is_some() || f.nonzero_after) {
        Row::C3
    } else if f.last_segment && f.failure.is_some() {
        Row::T1
    } else if f.last_segment && f.nonzero_after {
        Row::T2
    } else {
        Row::Ok
    }
}

/// What is known about a segment whose header does not decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HeaderFacts {
    /// Magic and CRC valid, but this version (H1).
    pub other_version: bool,
    /// The header's CRC is valid over an impossible field (not torn).
    pub crc_valid: bool,
    /// No later segment exists.
    pub last_segment: bool,
    /// No earlier segment exists.
    pub first_segment: bool,
    /// Every byte from offset 64 on is zero.
    pub zeros_after_header: bool,
    /// A valid batch of this store (or of the store id the header holds)
    /// lies in the file.
    pub has_batch: bool,
    /// An intact checkpoint of this store covers this segment.
    pub checkpoint_covers: bool,
    /// The store id is known (an earlier segment, or a checkpoint).
    pub store_id_known: bool,
    /// The whole file is zero.
    pub all_zero: bool,
}

/// The row of §6.3 for a segment header that does not decode.
pub fn classify_bad_header(f: &HeaderFacts) -> Row {
    if f.other_version {
        Row::H1
    } else if f.last_segment
        && !f.crc_valid
        && f.zeros_after_header
        && !f.has_batch
        && !f.checkpoint_covers
        && (f.store_id_known || f.all_zero)
    {
        Row::H2
    } else if f.first_segment && !f.store_id_known && !f.has_batch {
        Row::H3
    } else {
        Row::H4
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_rows_follow_the_table_order() {
        let last = StopFacts {
            last_segment: true,
            ..Default::default()
        };
        assert_eq!(classify_stop(&last), Row::Ok);
        let torn = StopFacts {
            failure: Some(false),
            nonzero_after: true,
            ..last
        };
        assert_eq!(classify_stop(&torn), Row::T1);
        assert_eq!(
            classify_stop(&StopFacts {
                nonzero_after: true,
                ..last
            }),
            Row::T2
        );
        assert_eq!(
            classify_stop(&StopFacts {
                later_batch: true,
                ..torn
            }),
            Row::C1
        );
        assert_eq!(
            classify_stop(&StopFacts {
                failure: Some(true),
                later_batch: true,
                ..torn
            }),
            Row::C2
        );
        assert_eq!(
            classify_stop(&StopFacts {
                last_segment: false,
                ..torn
            }),
            Row::C3
        );
        assert_eq!(
            classify_stop(&StopFacts {
                checkpoint_covers: true,
                ..torn
            }),
            Row::C4
        );
        // A sealed segment that ends cleanly is fine.
        assert_eq!(classify_stop(&StopFacts::default()), Row::Ok);
        for row in [Row::T1, Row::T2] {
            assert_eq!(row.kind(), Some(ProblemKind::TornTail));
        }
        for row in [Row::C1, Row::C2, Row::C3, Row::C4] {
            assert_eq!(row.kind(), Some(ProblemKind::Corruption));
        }
    }

    #[test]
    fn header_rows_follow_the_table_order() {
        let torn = HeaderFacts {
            last_segment: true,
            zeros_after_header: true,
            store_id_known: true,
            ..Default::default()
        };
        assert_eq!(classify_bad_header(&torn), Row::H2);
        assert_eq!(
            classify_bad_header(&HeaderFacts {
                other_version: true,
                ..torn
            }),
            Row::H1
        );
        for not_torn in [
            HeaderFacts {
                crc_valid: true,
                ..torn
            },
            HeaderFacts {
                has_batch: true,
                ..torn
            },
            HeaderFacts {
                checkpoint_covers: true,
                ..torn
            },
            HeaderFacts {
                zeros_after_header: false,
                ..torn
            },
            HeaderFacts {
                last_segment: false,
                ..torn
            },
        ] {
            assert_eq!(classify_bad_header(&not_torn), Row::H4, "{not_torn:?}");
        }
        let unknown = HeaderFacts {
            first_segment: true,
            ..Default::default()
        };
        assert_eq!(classify_bad_header(&unknown), Row::H3);
        assert_eq!(
            classify_bad_header(&HeaderFacts {
                all_zero: true,
                last_segment: true,
                zeros_after_header: true,
                ..unknown
            }),
            Row::H2
        );
    }
}
