//! The header every rank exchanges before a collective moves any data: which operation, which
//! reduction, which element type, which shape, which root, and whether this rank refused its
//! part. Every rank compares every header and reaches the same verdict, so either all ranks
//! go ahead or all return an error: never a hang on a mismatched call, never mixed data.
//!
//! A fused collective over a list of arrays sends one header for the whole list: the number
//! of arrays, their total elements and a fingerprint of every shape in order. When only the
//! fingerprints differ, every rank (each sees the same headers, so each decides the same)
//! exchanges the shapes once more to name the first array that differs; that second round
//! runs only on the way to an error.
//!
//! The exchange itself is one small all-reduce of a fixed size (each word's maximum and
//! minimum over ranks): when they are equal everywhere every rank sent the same header and
//! none refused, which is the common case and costs one tiny collective. Otherwise every rank
//! (each sees the same extremes) gathers every header, to name the rank that refused or
//! differs, and how.

use super::element::name_of;
use crate::error::{CollectiveFailure, Error, PeerRefusal, Result};
use crate::shape::MAX_RANK;
use mpi::traits::*;

/// Words in a header: magic, kind, reduction, element type, rank of the shape, the shape
/// ([`MAX_RANK`] words), root (or peer), refusal, the list's fingerprint.
pub(crate) const HEADER_WORDS: usize = 8 + MAX_RANK;

/// "gpuarena" with the header layout's version in the last byte, so a rank running another
/// build of the layout is told apart from one that asked for another operation.
const MAGIC: u64 = 0x6770_7561_7265_6e02;

/// Words per array when ranks compare a list's shapes one by one: the rank, then the shape.
const SHAPE_WORDS: usize = 1 + MAX_RANK;

/// Which collective a rank called.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    AllReduce = 1,
    AllReduceMean = 2,
    Broadcast = 3,
    AllGather = 4,
    ReduceScatter = 5,
    Send = 6,
    Recv = 7,
    Barrier = 8,
    AllReduceMany = 9,
    AllReduceMeanMany = 10,
    BroadcastMany = 11,
    /// The started forms of the three fused calls: a start on one rank against the blocking
    /// call on another is a mismatch, refused on both (the start's data would move on the
    /// progress thread while the blocking call's waits on the caller's: a program whose ranks
    /// disagree on which is which has a bug to fix, not a call to run).
    StartAllReduceMany = 12,
    StartAllReduceMeanMany = 13,
    StartBroadcastMany = 14,
}

impl Kind {
    fn from_code(code: u64) -> Option<Kind> {
        use Kind::*;
        [
            AllReduce,
            AllReduceMean,
            Broadcast,
            AllGather,
            ReduceScatter,
            Send,
            Recv,
            Barrier,
            AllReduceMany,
            AllReduceMeanMany,
            BroadcastMany,
            StartAllReduceMany,
            StartAllReduceMeanMany,
            StartBroadcastMany,
        ]
        .into_iter()
        .find(|k| *k as u64 == code)
    }

    fn name(self) -> &'static str {
        match self {
            Kind::AllReduce => "all_reduce",
            Kind::AllReduceMean => "all_reduce_mean",
            Kind::Broadcast => "broadcast",
            Kind::AllGather => "all_gather",
            Kind::ReduceScatter => "reduce_scatter",
            Kind::Send => "send",
            Kind::Recv => "recv",
            Kind::Barrier => "barrier",
            Kind::AllReduceMany => "all_reduce_many",
            Kind::AllReduceMeanMany => "all_reduce_mean_many",
            Kind::BroadcastMany => "broadcast_many",
            Kind::StartAllReduceMany => "start_all_reduce_many",
            Kind::StartAllReduceMeanMany => "start_all_reduce_mean_many",
            Kind::StartBroadcastMany => "start_broadcast_many",
        }
    }

    /// The single-array form of a fused call (itself for the others).
    pub(crate) fn single(self) -> Kind {
        match self {
            Kind::AllReduceMany => Kind::AllReduce,
            Kind::AllReduceMeanMany => Kind::AllReduceMean,
            Kind::BroadcastMany => Kind::Broadcast,
            other => other,
        }
    }

    /// The started form of a fused call (itself for the others).
    pub(crate) fn started(self) -> Kind {
        match self {
            Kind::AllReduceMany => Kind::StartAllReduceMany,
            Kind::AllReduceMeanMany => Kind::StartAllReduceMeanMany,
            Kind::BroadcastMany => Kind::StartBroadcastMany,
            other => other,
        }
    }

    /// Whether the call carries a list of arrays (its shape is `[arrays, elements]`).
    pub(crate) fn is_list(self) -> bool {
        matches!(
            self,
            Kind::AllReduceMany
                | Kind::AllReduceMeanMany
                | Kind::BroadcastMany
                | Kind::StartAllReduceMany
                | Kind::StartAllReduceMeanMany
                | Kind::StartBroadcastMany
        )
    }

    /// Whether the call has a root (a broadcast's).
    pub(crate) fn has_root(self) -> bool {
        matches!(
            self,
            Kind::Broadcast | Kind::BroadcastMany | Kind::StartBroadcastMany
        )
    }
}

/// What this rank's `error` tells the other ranks it refused for (its own error says more, on
/// this rank).
fn refusal_of(error: &Error) -> PeerRefusal {
    match error {
        Error::ForeignArray { .. } | Error::PendingInRecorder { .. } => PeerRefusal::NotReady,
        Error::TransferGuard { .. } => PeerRefusal::TransferGuard,
        Error::Shape { .. } => PeerRefusal::Shape,
        Error::HostAllocation { .. } | Error::OutOfMemory { .. } => PeerRefusal::HostMemory,
        Error::InvalidArgument { .. } | Error::Index { .. } => PeerRefusal::InvalidArgument,
        Error::Collective {
            failure: CollectiveFailure::ThreadSupport,
            ..
        } => PeerRefusal::ThreadSupport,
        _ => PeerRefusal::Other,
    }
}

/// The refusal a header's refusal word stands for: `None` for 0 (the rank refused nothing);
/// a code this build does not know is [`PeerRefusal::Other`].
fn refusal_from_code(code: u64) -> Option<PeerRefusal> {
    const KNOWN: [PeerRefusal; 7] = [
        PeerRefusal::NotReady,
        PeerRefusal::TransferGuard,
        PeerRefusal::Shape,
        PeerRefusal::HostMemory,
        PeerRefusal::InvalidArgument,
        PeerRefusal::Other,
        PeerRefusal::ThreadSupport,
    ];
    (code != 0).then(|| {
        KNOWN
            .into_iter()
            .find(|&refusal| refusal as u64 == code)
            .unwrap_or(PeerRefusal::Other)
    })
}

/// One rank's call, as the other ranks see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub(crate) kind: Kind,
    /// The reduction's code (0 when none).
    pub(crate) op: u64,
    /// The element type's code (0 for barrier).
    pub(crate) dtype: u64,
    pub(crate) shape: Vec<usize>,
    /// The root of a broadcast, the peer of a send or receive, else 0.
    pub(crate) root: u64,
    /// The shape of every array of a fused call, in order (empty for one array: its shape is
    /// in `shape`, and a fused call's `shape` is `[arrays, elements]`).
    pub(crate) list: Vec<Vec<usize>>,
}

impl Header {
    /// The header of a call on one array of `shape` (none for a barrier).
    pub(crate) fn of(kind: Kind, op: u64, dtype: u64, shape: &[usize], root: u64) -> Self {
        Header {
            kind,
            op,
            dtype,
            shape: shape.to_vec(),
            root,
            list: Vec::new(),
        }
    }

    /// The header of a fused call on arrays of `shapes`.
    pub(crate) fn list(
        kind: Kind,
        op: u64,
        dtype: u64,
        shapes: Vec<Vec<usize>>,
        root: u64,
    ) -> Self {
        let elements: usize = shapes.iter().map(|s| s.iter().product::<usize>()).sum();
        let shape = [shapes.len(), elements];
        Header {
            list: shapes,
            ..Header::of(kind, op, dtype, &shape, root)
        }
    }

    /// A 64-bit FNV-1a hash of the list's shapes (rank and dimensions, in order): equal lists
    /// give equal fingerprints on every machine; a difference is then found word by word.
    fn fingerprint(&self) -> u64 {
        let mut hash = 0xcbf2_9ce4_8422_2325u64;
        for shape in &self.list {
            for word in std::iter::once(shape.len()).chain(shape.iter().copied()) {
                for byte in (word as u64).to_le_bytes() {
                    hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
                }
            }
        }
        hash
    }

    fn encode(&self, refusal: Option<PeerRefusal>) -> [u64; HEADER_WORDS] {
        let mut words = [0u64; HEADER_WORDS];
        words[0] = MAGIC;
        words[1] = self.kind as u64;
        words[2] = self.op;
        words[3] = self.dtype;
        // A shape above MAX_RANK never gets here (arrays are checked when made); clamp anyway.
        let rank = self.shape.len().min(MAX_RANK);
        words[4] = rank as u64;
        for (w, &d) in words[5..5 + MAX_RANK].iter_mut().zip(&self.shape[..rank]) {
            *w = d as u64;
        }
        words[5 + MAX_RANK] = self.root;
        words[6 + MAX_RANK] = refusal.map_or(0, |refusal| refusal as u64);
        words[7 + MAX_RANK] = self.fingerprint();
        words
    }

    /// The header in `words`, its refusal code and list fingerprint, or what is wrong with it
    /// (the list's shapes themselves do not travel: the fingerprint stands for them).
    fn decode(words: &[u64]) -> std::result::Result<(Header, u64, u64), UnreadableHeader> {
        if words[0] != MAGIC {
            return Err(UnreadableHeader::OtherVersion);
        }
        let kind = Kind::from_code(words[1]).ok_or(UnreadableHeader::UnknownCollective)?;
        let rank = (words[4] as usize).min(MAX_RANK);
        let shape: Vec<usize> = words[5..5 + rank].iter().map(|&d| d as usize).collect();
        Ok((
            Header::of(kind, words[2], words[3], &shape, words[5 + MAX_RANK]),
            words[6 + MAX_RANK],
            words[7 + MAX_RANK],
        ))
    }

    /// `all_reduce(sum) of f32 [4, 8]`, `broadcast from rank 0 of u32 [3]`.
    fn describe(&self) -> String {
        let mut text = self.kind.name().to_string();
        // A mean's sum is how it is made, not what the user asked for: its name says it all.
        let mean = matches!(
            self.kind,
            Kind::AllReduceMean | Kind::AllReduceMeanMany | Kind::StartAllReduceMeanMany
        );
        if self.op != 0 && !mean {
            let op = super::reduce_op::ReduceOp::ALL
                .iter()
                .find(|o| o.code() == self.op)
                .map_or("?", |o| o.name());
            text += &format!("({op})");
        }
        match self.kind {
            Kind::Barrier => return text,
            Kind::Send => text += &format!(" to rank {}", self.root),
            Kind::Recv => text += &format!(" from rank {}", self.root),
            kind if kind.has_root() => text += &format!(" from rank {}", self.root),
            _ => {}
        }
        if self.kind.is_list() {
            let (arrays, elements) = (self.shape[0], self.shape[1]);
            let (plural, elements_plural) = (
                if arrays == 1 { "" } else { "s" },
                if elements == 1 { "" } else { "s" },
            );
            return format!(
                "{text} of {arrays} {} array{plural} ({elements} element{elements_plural})",
                name_of(self.dtype)
            );
        }
        format!("{text} of {} {:?}", name_of(self.dtype), self.shape)
    }

    /// The first field in which `other` differs from this header.
    fn difference(&self, other: &Header) -> &'static str {
        if self.kind != other.kind && self.kind.started() == other.kind.started() {
            "a started and a blocking call differ (a start_*_many call on one rank must meet the same start on every rank)"
        } else if self.kind != other.kind {
            "the operations differ"
        } else if self.op != other.op {
            "the reductions differ"
        } else if self.dtype != other.dtype {
            "the element types differ"
        } else if self.kind.is_list() && self.shape[0] != other.shape[0] {
            "the numbers of arrays differ"
        } else if self.kind.is_list() && self.shape != other.shape {
            "the lists' sizes differ"
        } else if self.shape != other.shape {
            "the shapes differ"
        } else if self.root != other.root {
            "the roots differ"
        } else {
            "the arrays' shapes differ"
        }
    }
}

/// What another rank sent instead of a header this build can read (named in the error that
/// says every rank must run the same build).
#[derive(Debug, thiserror::Error)]
enum UnreadableHeader {
    /// The magic word is not this build's.
    #[error("a header of another gpu-arena version (or another MPI call of the same size)")]
    OtherVersion,
    /// The collective's code is not one this build knows.
    #[error("an unknown collective")]
    UnknownCollective,
}

/// Exchanges headers with every rank of `comm` and returns the common verdict: this rank's
/// `prepared` part when all ranks called the same collective and none refused; this rank's own
/// error when its preparation failed; else [`Error::Collective`] naming the rank that refused
/// or differs, and how. Every rank takes part in the exchange whatever it prepared, so no rank
/// is left waiting.
pub(crate) fn agree<C: Communicator, P>(
    comm: &C,
    operation: &'static str,
    mine: &Header,
    prepared: Result<P>,
) -> Result<P> {
    agree_waiting(comm, operation, mine, prepared, None)
}

/// [`agree`], waiting for the other ranks' headers by testing a non-blocking all-gather every
/// `poll` and sleeping in between when `poll` is given (a start on a machine whose ranks
/// outnumber its cores, where MPI's busy wait would take the core a late peer needs).
pub(crate) fn agree_waiting<C: Communicator, P>(
    comm: &C,
    operation: &'static str,
    mine: &Header,
    prepared: Result<P>,
    poll: Option<std::time::Duration>,
) -> Result<P> {
    let refusal = prepared.as_ref().err().map(refusal_of);
    let words = mine.encode(refusal);
    if every_rank_sent(comm, &words, poll) {
        // Every header is this one, refusal word included: every rank called the same
        // collective and none refused.
        return prepared;
    }
    let ranks = comm.size() as usize;
    let mut all = vec![0u64; HEADER_WORDS * ranks];
    mpi::request::scope(|scope| {
        complete(
            comm.immediate_all_gather_into(scope, &words[..], &mut all[..]),
            poll,
        )
    });
    let prepared = prepared?;
    let mut headers = Vec::with_capacity(ranks);
    for (rank, words) in all.chunks(HEADER_WORDS).enumerate() {
        headers.push(header_sent_by(words, rank, operation, Exchange::Group)?);
    }
    let (first, first_print) = &headers[0];
    if let Some((rank, (other, _))) = headers.iter().enumerate().find(|(_, h)| h.0 != *first) {
        // Lists of as many arrays on every rank, of one call, differing only in their sizes:
        // the same second round as for differing shapes names the first array that differs
        // (every rank sees the same headers, so every rank takes it).
        let same_call_and_length = |(header, _): &(Header, u64)| {
            (
                header.kind,
                header.op,
                header.dtype,
                header.root,
                header.shape.first(),
            ) == (
                first.kind,
                first.op,
                first.dtype,
                first.root,
                first.shape.first(),
            )
        };
        if first.kind.is_list() && headers.iter().all(same_call_and_length) {
            return Err(list_difference(comm, operation, mine, rank, poll));
        }
        return Err(Error::Collective {
            operation,
            failure: CollectiveFailure::Mismatch { rank },
            reason: format!(
                "{}: rank 0 called {} but rank {rank} called {}. Every rank must call the same collective with the same element type and shape{} at the same point",
                first.difference(other),
                first.describe(),
                other.describe(),
                if first.kind.has_root() { " (and root)" } else { "" },
            ),
        });
    }
    if let Some(rank) = headers.iter().position(|(_, print)| print != first_print) {
        return Err(list_difference(comm, operation, mine, rank, poll));
    }
    Ok(prepared)
}

/// Whether every rank of `comm` sent exactly `words`: one small all-reduce (the maximum of
/// every word and of its complement, which is the complement of the minimum) over a fixed
/// `2 × HEADER_WORDS` words, whatever the number of ranks, where gathering every header
/// grows with it. Every rank sees the same maxima and so reaches the same answer; only when
/// it is no (a mismatch or a refusal, on the way to an error) do the ranks gather every header
/// to name who differs and how. With `poll`, waits as [`agree_waiting`] says.
fn every_rank_sent<C: Communicator>(
    comm: &C,
    words: &[u64; HEADER_WORDS],
    poll: Option<std::time::Duration>,
) -> bool {
    let mut both = [0u64; 2 * HEADER_WORDS];
    for (i, &w) in words.iter().enumerate() {
        both[i] = w;
        both[HEADER_WORDS + i] = !w;
    }
    let mut maxima = [0u64; 2 * HEADER_WORDS];
    let max = mpi::collective::SystemOperation::max();
    mpi::request::scope(|scope| {
        complete(
            comm.immediate_all_reduce_into(scope, &both[..], &mut maxima[..], max),
            poll,
        )
    });
    let (largest, smallest_complement) = maxima.split_at(HEADER_WORDS);
    largest
        .iter()
        .zip(smallest_complement)
        .all(|(&max, &not_min)| max == !not_min)
}

/// How a header reached this rank, which decides what its errors tell the reader.
#[derive(Clone, Copy)]
enum Exchange {
    /// Gathered from every rank of the group.
    Group,
    /// Received from the other side of a send/recv.
    Pair,
}

/// The header and list fingerprint `rank` sent as `words`; [`Error::Collective`] naming
/// `rank` when they are not a header this build reads or when that rank refused its part.
fn header_sent_by(
    words: &[u64],
    rank: usize,
    operation: &'static str,
    exchange: Exchange,
) -> Result<(Header, u64)> {
    let (header, refusal, fingerprint) = Header::decode(words).map_err(|what| Error::Collective {
        operation,
        failure: CollectiveFailure::UnreadableHeader { rank },
        reason: match exchange {
            Exchange::Group => format!("rank {rank} sent {what}; every rank must run the same gpu-arena build and call the same collective"),
            Exchange::Pair => format!("rank {rank} sent {what}"),
        },
    })?;
    if let Some(refusal) = refusal_from_code(refusal) {
        let moved = match exchange {
            Exchange::Group => "No rank moved any data",
            Exchange::Pair => "No data moved",
        };
        return Err(Error::Collective {
            operation,
            failure: CollectiveFailure::Refused { rank, refusal },
            reason: format!(
                "rank {rank} refused its part ({refusal}); see the error on that rank. {moved}"
            ),
        });
    }
    Ok((header, fingerprint))
}

/// Returns when `request` completes: [`wait_sleeping`] with `poll`, MPI's wait without.
///
/// Every exchange of the agreement is an immediate (non-blocking) collective, whether the
/// call is blocking or started: MPI never matches a blocking collective with a non-blocking
/// one (MPI 4.0, §6.12), so a start polling on one rank and a blocking call on another
/// would each wait for the other forever; with the same calls on every rank they meet, and
/// the headers say that the calls differ.
fn complete<'a, D: ?Sized, S: mpi::request::Scope<'a>>(
    request: mpi::request::Request<'a, D, S>,
    poll: Option<std::time::Duration>,
) {
    match poll {
        Some(poll) => wait_sleeping(request, poll),
        None => {
            request.wait();
        }
    }
}

/// Returns when `request` completes, testing it every `poll` and sleeping in between rather
/// than busy-waiting in MPI.
pub(crate) fn wait_sleeping<'a, D: ?Sized, S: mpi::request::Scope<'a>>(
    mut request: mpi::request::Request<'a, D, S>,
    poll: std::time::Duration,
) {
    loop {
        match request.test() {
            Ok(_) => return,
            Err(pending) => {
                request = pending;
                std::thread::sleep(poll);
            }
        }
    }
}

/// The error of fused calls whose lists agree in length but not in shapes (or sizes): every
/// rank exchanges its shapes (the same number of them on every rank, as the headers agreed)
/// and names the first array whose shape differs from rank 0's. `first_differing` is the first
/// rank whose list fingerprint differs, named when no shape does.
fn list_difference<C: Communicator>(
    comm: &C,
    operation: &'static str,
    mine: &Header,
    first_differing: usize,
    poll: Option<std::time::Duration>,
) -> Error {
    let ranks = comm.size() as usize;
    let mut words = vec![0u64; SHAPE_WORDS * mine.list.len()];
    for (slot, shape) in words.chunks_mut(SHAPE_WORDS).zip(&mine.list) {
        let rank = shape.len().min(MAX_RANK);
        slot[0] = rank as u64;
        for (w, &d) in slot[1..].iter_mut().zip(&shape[..rank]) {
            *w = d as u64;
        }
    }
    let mut all = vec![0u64; words.len() * ranks];
    mpi::request::scope(|scope| {
        complete(
            comm.immediate_all_gather_into(scope, &words[..], &mut all[..]),
            poll,
        )
    });
    let shape_of = |rank: usize, index: usize| -> Vec<u64> {
        let at = (rank * mine.list.len() + index) * SHAPE_WORDS;
        let dims = all[at] as usize;
        all[at + 1..at + 1 + dims.min(MAX_RANK)].to_vec()
    };
    for index in 0..mine.list.len() {
        let reference = shape_of(0, index);
        if let Some(rank) = (1..ranks).find(|&r| shape_of(r, index) != reference) {
            return Error::Collective {
                operation,
                failure: CollectiveFailure::Mismatch { rank },
                reason: format!(
                    "the arrays' shapes differ: array {index} of the list is {reference:?} on rank 0 but {:?} on rank {rank}. Every rank must pass arrays of the same shapes in the same order",
                    shape_of(rank, index)
                ),
            };
        }
    }
    Error::Collective {
        operation,
        failure: CollectiveFailure::UnreadableHeader {
            rank: first_differing,
        },
        reason: "the lists' fingerprints differ but no shape does (a header of another gpu-arena build?); every rank must run the same build".into(),
    }
}

/// The handshake of a send and its receive: each side sends its header to the other and both
/// reach the same verdict (complementary calls, the same element type and shape, no refusal).
/// `sender` says which side this rank is; `peer` is the other rank.
pub(crate) fn agree_pair<C: Communicator, P>(
    comm: &C,
    operation: &'static str,
    mine: &Header,
    prepared: Result<P>,
    peer: usize,
    sender: bool,
) -> Result<P> {
    let refusal = prepared.as_ref().err().map(refusal_of);
    let words = mine.encode(refusal);
    let mut theirs = [0u64; HEADER_WORDS];
    let process = comm.process_at_rank(peer as i32);
    // Both sides send and receive at once (`MPI_Sendrecv`), whichever call each made: two
    // receives (or two sends) facing each other meet, and are refused below, rather than wait
    // for each other forever.
    mpi::point_to_point::send_receive_into_with_tags(
        &words[..],
        &process,
        HANDSHAKE_TAG,
        &mut theirs[..],
        &process,
        HANDSHAKE_TAG,
    );
    let prepared = prepared?;
    let (other, _) = header_sent_by(&theirs, peer, operation, Exchange::Pair)?;
    let expected = if sender { Kind::Recv } else { Kind::Send };
    if other.kind != expected || other.dtype != mine.dtype || other.shape != mine.shape {
        let what = if other.kind != expected {
            "the operations do not pair"
        } else if other.dtype != mine.dtype {
            "the element types differ"
        } else {
            "the shapes differ"
        };
        return Err(Error::Collective {
            operation,
            failure: CollectiveFailure::Mismatch { rank: peer },
            reason: format!(
                "{what}: this rank called {} but rank {peer} called {}. A send must meet a recv of the same element type and shape",
                mine.describe(),
                other.describe()
            ),
        });
    }
    Ok(prepared)
}

/// The tag of send/recv handshakes on the collectives' private communicator.
pub(crate) const HANDSHAKE_TAG: i32 = 1;
/// The tag of send/recv data on the collectives' private communicator.
pub(crate) const DATA_TAG: i32 = 2;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_header_says_array_and_element_in_the_singular_for_one() {
        let one = Header::list(Kind::AllReduceMany, 0, 1, vec![vec![1]], 0);
        assert!(
            one.describe().ends_with(" of 1 f32 array (1 element)"),
            "{}",
            one.describe()
        );
        let many = Header::list(Kind::AllReduceMany, 0, 1, vec![vec![2, 3], vec![4]], 0);
        assert!(
            many.describe().ends_with(" of 2 f32 arrays (10 elements)"),
            "{}",
            many.describe()
        );
    }

    #[test]
    fn a_mean_is_described_by_its_name_without_the_sum_it_is_made_of() {
        let sum = super::super::reduce_op::ReduceOp::Sum.code();
        let mean = Header::list(Kind::AllReduceMeanMany, sum, 1, vec![vec![2]], 0);
        assert!(
            mean.describe().starts_with("all_reduce_mean_many of 1 f32"),
            "{}",
            mean.describe()
        );
        let summed = Header::list(Kind::AllReduceMany, sum, 1, vec![vec![2]], 0);
        assert!(
            summed
                .describe()
                .starts_with("all_reduce_many(sum) of 1 f32"),
            "{}",
            summed.describe()
        );
    }
}
