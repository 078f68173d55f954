//! The context's gathered batch as state: the single ops gathered so far, the staging of their
//! small uploads, the submission id they will be, a device refusal waiting to be reported, and
//! whether submissions need the memory dependency to host reads. What the context does with it
//! (gathering, submitting, flushing) is `gathered.rs`; this file is apart because the context
//! holds the batch, so it names nothing above it.

use crate::host_link::gathered_staging::GatheredStaging;
use crate::pipelines::DeviceRefusal;
use crate::step::GatheredSteps;
use crate::submission::SubmissionId;

/// The context's gathered single ops and the submission they will be.
#[derive(Default)]
pub(crate) struct GatheredBatch {
    pub(super) steps: GatheredSteps,
    /// Where the batch's small uploads wait for their copy commands.
    pub(super) staging: GatheredStaging,
    /// The id the batch's submission gets: the next one, reserved by its first op.
    pub(super) id: SubmissionId,
    /// The timeline's clock when each of the batch's dispatches was gathered, in order (none
    /// without a timeline): its kernel time counts from then, as its dispatch event does.
    pub(super) dispatch_ns: Vec<u64>,
    /// The device's refusal of a batch when it was submitted, until a call reports it.
    pub(super) refusal: Option<DeviceRefusal>,
    /// Whether submissions need the memory dependency to host reads (Vulkan), once known.
    pub(super) host_barrier_needed: Option<bool>,
}

/// Whether the host reads what a submission writes as soon as it completes (a readback, a
/// host read waiting for it): then the submission ends with the memory dependency to host
/// reads ([`crate::backend::host_read_barrier`]). Other submissions leave it out, and a host
/// read after them adds it (`ContextInner::host_visible_through`, `gathered.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HostRead {
    /// A host read of the submission's writes follows it.
    Follows,
    /// No host read waits for it now.
    Later,
}
