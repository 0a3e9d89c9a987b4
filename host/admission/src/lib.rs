//! Admission: what an API client may ask of a shared server, decided before any backend work.
//!
//! `orchard run` and `orchard eval` are the operator's own tools and skip admission; everything
//! that arrives over HTTP passes through [`Admission::admit`], which
//!
//! - rewrites the image to what the backend should use, or refuses it ([`ImagePolicy`]): no host
//!   paths unless under an operator's image root, registry pulls only from allowed registries;
//! - fills in the operator's default resources and refuses requests above the maxima
//!   ([`ResourcePolicy`]);
//! - holds the tenant's quota for the sandbox being created ([`Quotas`]): a tenant over its quota
//!   is told to retry later instead of taking the host from everybody else.

#![warn(missing_docs)]

mod images;
mod quotas;
mod rates;
mod resources;

pub use images::{DEFAULT_REGISTRIES, ImagePolicy};
pub use quotas::{Quota, Quotas, Reservation, Usage};
pub use rates::{CreateRates, Rate};
pub use resources::{ResourcePolicy, format_bytes};

use orchard_sandbox::SandboxSpec;

#[derive(Debug, thiserror::Error, PartialEq)]
/// Why a request was not admitted.
pub enum AdmissionError {
    /// The request asked for something this server never allows; the message names the field.
    #[error("{field}: {reason}")]
    Refused {
        /// The field of the request.
        field: &'static str,
        /// Why it cannot be had.
        reason: String,
    },
    /// The tenant is at its quota; retrying after some of its sandboxes are gone will work.
    #[error("{0}")]
    OverQuota(String),
    /// Creates come faster than the server's or the tenant's create rate allows.
    #[error("{message}")]
    RateLimited {
        /// What was exceeded, and the wait.
        message: String,
        /// Seconds after which the same create would pass.
        retry_after_seconds: u64,
    },
}

impl AdmissionError {
    pub(crate) fn refused(field: &'static str, reason: impl Into<String>) -> Self {
        AdmissionError::Refused { field, reason: reason.into() }
    }
}

/// The operator's rules for API clients.
#[derive(Debug, Default)]
pub struct Admission {
    /// Which images may be named.
    pub images: ImagePolicy,
    /// Default and most resources.
    pub resources: ResourcePolicy,
    /// Each tenant's quota and what it holds.
    pub quotas: Quotas,
    /// How fast sandboxes may be created, by the whole server and by each tenant.
    pub rates: CreateRates,
}

impl Admission {
    /// Checks and completes `count` sandboxes of `spec` for its tenant. On success the returned
    /// spec is what the backend gets, and the reservation holds the tenant's quota until it is
    /// committed (the sandboxes exist) or dropped (they were not made).
    pub fn admit(&self, mut spec: SandboxSpec, count: usize) -> Result<(SandboxSpec, Reservation), AdmissionError> {
        spec.image = self.images.admit(&spec.image)?;
        self.resources.apply(&mut spec)?;
        let reservation = self.quotas.reserve(&spec, count)?;
        // Last: a create refused for anything else spends none of the rate.
        self.rates.take(&spec.tenant, count)?;
        Ok((spec, reservation))
    }
}
