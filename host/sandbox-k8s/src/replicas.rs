//! Sharing the reaper between host replicas without a leader and without double work.
//!
//! Each replica renews its own Lease (it writes no other); the live replicas are the leases
//! renewed within the lease duration. Every sandbox belongs to exactly one live replica by
//! rendezvous hashing of (replica, sandbox id): replicas that see the same live set split the
//! work disjointly, a replica that stops renewing loses its share to the others within one
//! lease duration, and nothing relies on the API server's optimistic concurrency.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Api;
use kube::api::{ListParams, PostParams};
use sha2::{Digest, Sha256};

use crate::spec::{LABEL_MANAGED, MANAGED_BY, MANAGED_SELECTOR};

/// Label on replica leases (their objects share the sandboxes' `managed-by`).
pub const LABEL_ROLE: &str = "orchard.dev/role";
const ROLE: &str = "host-replica";

/// The name of a host replica's lease.
pub fn lease_name(host_id: &str) -> String {
    format!("orchard-host-{}", crate::spec::label_value(host_id).to_ascii_lowercase())
}

/// Creates or renews this replica's lease.
pub async fn renew(api: &Api<Lease>, host_id: &str, duration: Duration) -> Result<(), kube::Error> {
    let name = lease_name(host_id);
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            labels: Some(BTreeMap::from([
                (LABEL_MANAGED.to_string(), MANAGED_BY.to_string()),
                (LABEL_ROLE.to_string(), ROLE.to_string()),
            ])),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(host_id.to_string()),
            lease_duration_seconds: Some(duration.as_secs().max(1) as i32),
            renew_time: Some(MicroTime(now_timestamp())),
            ..Default::default()
        }),
    };
    let patch = serde_json::json!({"spec": lease.spec});
    match api.patch(&name, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&patch)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => api.create(&PostParams::default(), &lease).await.map(|_| ()),
        Err(e) => Err(e),
    }
}

/// Removes this replica's lease on a graceful stop, so the others take its share at once.
pub async fn release(api: &Api<Lease>, host_id: &str) {
    let _ = api.delete(&lease_name(host_id), &Default::default()).await;
}

/// The replicas whose lease is current, always including `me`.
pub async fn live(api: &Api<Lease>, me: &str) -> Result<Vec<String>, kube::Error> {
    let leases = api.list(&ListParams::default().labels(MANAGED_SELECTOR)).await?;
    let now = now_timestamp();
    let mut hosts: Vec<String> = leases
        .items
        .iter()
        .filter(|l| l.metadata.labels.as_ref().and_then(|m| m.get(LABEL_ROLE)).map(String::as_str) == Some(ROLE))
        .filter_map(|l| l.spec.as_ref())
        .filter(|s| {
            let (Some(renewed), Some(secs)) = (&s.renew_time, s.lease_duration_seconds) else { return false };
            renewed.0.timestamp() + i64::from(secs) >= now.timestamp()
        })
        .filter_map(|s| s.holder_identity.clone())
        .collect();
    if !hosts.iter().any(|h| h == me) {
        hosts.push(me.to_string());
    }
    hosts.sort();
    hosts.dedup();
    Ok(hosts)
}

/// The replica in charge of a sandbox: highest rendezvous score.
pub fn owner_of<'a>(sandbox: &str, replicas: &'a [String]) -> Option<&'a str> {
    replicas
        .iter()
        .max_by_key(|host| {
            let digest = Sha256::new().chain_update(host.as_bytes()).chain_update([0]).chain_update(sandbox).finalize();
            u64::from_be_bytes(digest[..8].try_into().expect("8 bytes"))
        })
        .map(String::as_str)
}

fn now_timestamp() -> k8s_openapi::chrono::DateTime<k8s_openapi::chrono::Utc> {
    k8s_openapi::chrono::Utc::now()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_sandbox_has_one_owner_and_the_split_is_fair() {
        let replicas: Vec<String> = ["host-a", "host-b", "host-c"].iter().map(|s| s.to_string()).collect();
        let mut counts = BTreeMap::new();
        for i in 0..3000 {
            let id = format!("sb-{i}");
            let owner = owner_of(&id, &replicas).unwrap();
            assert_eq!(owner, owner_of(&id, &replicas).unwrap(), "stable");
            *counts.entry(owner).or_insert(0) += 1;
        }
        assert!(counts.values().all(|&n| (800..1200).contains(&n)), "{counts:?}");
        // Losing a replica moves only its own share.
        let two = &replicas[..2];
        for i in 0..300 {
            let id = format!("sb-{i}");
            let before = owner_of(&id, &replicas).unwrap();
            if before != "host-c" {
                assert_eq!(owner_of(&id, two).unwrap(), before);
            }
        }
    }
}
