pub(crate) mod node;
pub(crate) mod shared;
// Ember patch: `CollectiveError::Global` carries this type; export it so callers can match on it.
pub use shared::GlobalCollectiveError;

#[cfg(feature = "orchestrator")]
pub mod orchestrator;
#[cfg(feature = "orchestrator")]
pub use orchestrator::*;

mod base;
pub use base::*;
