//! Per-tenant quotas: how many sandboxes, how much memory and how many cores one tenant may hold
//! at once, so that one tenant can neither exhaust the host nor starve the others.
//!
//! Usage is kept in a ledger: sandboxes being created hold a [`Reservation`] (so that concurrent
//! creates cannot all slip under the quota), live sandboxes are entered when created and removed
//! when deleted, and [`Quotas::resync`] rebuilds the live part from the backend's own list (idle
//! reaping, other replicas, a restart) so that the ledger never drifts for long.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use orchard_sandbox::SandboxSpec;

use crate::{AdmissionError, format_bytes};

/// Limits for one tenant; `None` is no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Quota {
    /// Most sandboxes (`None`: no limit).
    pub sandboxes: Option<usize>,
    /// Most memory over its sandboxes, in bytes.
    pub memory_bytes: Option<u64>,
    /// Most CPU over its sandboxes, in cores.
    pub cpu: Option<f64>,
}

impl Quota {
    /// Parses `sandboxes=N,memory=SIZE,cpu=CORES` (any subset).
    pub fn parse(text: &str) -> Result<Quota, String> {
        let mut quota = Quota::default();
        for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (key, value) = item.split_once('=').ok_or_else(|| format!("{item:?}: expected KEY=VALUE"))?;
            let value = value.trim();
            match key.trim() {
                "sandboxes" => {
                    quota.sandboxes = Some(value.parse().map_err(|_| format!("sandboxes={value}: not a count"))?)
                }
                "memory" => quota.memory_bytes = Some(orchard_sandbox::parse_memory(&value.into())?),
                "cpu" => quota.cpu = Some(orchard_sandbox::parse_cpu(&value.into())?),
                other => return Err(format!("{other:?}: unknown quota (use sandboxes, memory, cpu)")),
            }
        }
        Ok(quota)
    }
}

/// What a tenant holds. CPU in thousandths of a core, so that sums never drift.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Sandboxes held.
    pub sandboxes: usize,
    /// Memory held, in bytes.
    pub memory_bytes: u64,
    /// CPU held, in thousandths of a core.
    pub millicpu: u64,
}

impl Usage {
    fn of(memory_bytes: Option<u64>, cpu: Option<f64>) -> Usage {
        Usage { sandboxes: 1, memory_bytes: memory_bytes.unwrap_or(0), millicpu: millicpu(cpu) }
    }
    fn times(self, n: usize) -> Usage {
        Usage {
            sandboxes: self.sandboxes * n,
            memory_bytes: self.memory_bytes * n as u64,
            millicpu: self.millicpu * n as u64,
        }
    }
    fn add(&mut self, other: Usage) {
        self.sandboxes += other.sandboxes;
        self.memory_bytes += other.memory_bytes;
        self.millicpu += other.millicpu;
    }
    fn sub(&mut self, other: Usage) {
        self.sandboxes = self.sandboxes.saturating_sub(other.sandboxes);
        self.memory_bytes = self.memory_bytes.saturating_sub(other.memory_bytes);
        self.millicpu = self.millicpu.saturating_sub(other.millicpu);
    }
}

fn millicpu(cpu: Option<f64>) -> u64 {
    cpu.map(|c| (c * 1000.0).round() as u64).unwrap_or(0)
}

#[derive(Debug, Default)]
struct Ledger {
    /// Live sandboxes: id → (tenant, usage).
    live: HashMap<String, (String, Usage)>,
    /// Per tenant: live plus reserved.
    totals: HashMap<String, Usage>,
}

impl Ledger {
    fn add(&mut self, tenant: &str, usage: Usage) {
        self.totals.entry(tenant.to_string()).or_default().add(usage);
    }
    fn sub(&mut self, tenant: &str, usage: Usage) {
        if let Some(total) = self.totals.get_mut(tenant) {
            total.sub(usage);
        }
    }
}

#[derive(Debug, Default)]
/// Every tenant's quota and usage.
pub struct Quotas {
    /// Applies to every tenant without a quota of its own.
    pub default: Quota,
    per_tenant: HashMap<String, Quota>,
    ledger: Arc<Mutex<Ledger>>,
}

impl Quotas {
    /// Quotas where every tenant has `default` unless set.
    pub fn new(default: Quota) -> Self {
        Quotas { default, ..Default::default() }
    }

    /// Sets one tenant's quota.
    pub fn set(&mut self, tenant: &str, quota: Quota) {
        self.per_tenant.insert(tenant.to_string(), quota);
    }

    /// A tenant's quota.
    pub fn quota(&self, tenant: &str) -> Quota {
        self.per_tenant.get(tenant).copied().unwrap_or(self.default)
    }

    /// What the tenant holds now (live and being created).
    pub fn usage(&self, tenant: &str) -> Usage {
        self.lock().totals.get(tenant).copied().unwrap_or_default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Holds room for `count` sandboxes of `spec` in its tenant's quota, or says which part of
    /// the quota is full.
    pub fn reserve(&self, spec: &SandboxSpec, count: usize) -> Result<Reservation, AdmissionError> {
        let tenant = spec.tenant.as_str();
        let quota = self.quota(tenant);
        let each = Usage::of(spec.memory_bytes, spec.cpu);
        let asked = each.times(count);
        let mut ledger = self.lock();
        let held = ledger.totals.get(tenant).copied().unwrap_or_default();
        if let Some(max) = quota.sandboxes
            && held.sandboxes + asked.sandboxes > max
        {
            return Err(over(tenant, &format!("{max} sandboxes"), &format!("{} in use", held.sandboxes), count));
        }
        if let Some(max) = quota.memory_bytes
            && held.memory_bytes + asked.memory_bytes > max
        {
            return Err(over(
                tenant,
                &format!("{} of sandbox memory", format_bytes(max)),
                &format!(
                    "{} in use, {} more asked for",
                    format_bytes(held.memory_bytes),
                    format_bytes(asked.memory_bytes)
                ),
                count,
            ));
        }
        if let Some(max) = quota.cpu
            && held.millicpu + asked.millicpu > millicpu(Some(max))
        {
            return Err(over(
                tenant,
                &format!("{max} cores"),
                &format!("{} in use, {} more asked for", held.millicpu as f64 / 1000.0, asked.millicpu as f64 / 1000.0),
                count,
            ));
        }
        ledger.add(tenant, asked);
        Ok(Reservation { ledger: self.ledger.clone(), tenant: tenant.to_string(), each, left: count })
    }

    /// Forgets a deleted sandbox.
    pub fn release(&self, id: &str) {
        let mut ledger = self.lock();
        if let Some((tenant, usage)) = ledger.live.remove(id) {
            ledger.sub(&tenant, usage);
        }
    }

    /// Rebuilds the live part of the ledger from what the backend says exists:
    /// `(id, tenant, memory, cpu)` of every sandbox. Reservations in flight are kept.
    pub fn resync<'a>(&self, alive: impl IntoIterator<Item = (&'a str, &'a str, Option<u64>, Option<f64>)>) {
        let mut ledger = self.lock();
        let old: Vec<(String, Usage)> = ledger.live.drain().map(|(_, v)| v).collect();
        for (tenant, usage) in old {
            ledger.sub(&tenant, usage);
        }
        for (id, tenant, memory, cpu) in alive {
            let usage = Usage::of(memory, cpu);
            ledger.live.insert(id.to_string(), (tenant.to_string(), usage));
            ledger.add(tenant, usage);
        }
    }
}

fn over(tenant: &str, limit: &str, state: &str, count: usize) -> AdmissionError {
    let asked = if count == 1 { String::from("a sandbox") } else { format!("{count} sandboxes") };
    AdmissionError::OverQuota(format!(
        "tenant {tenant:?} is at its quota of {limit} ({state}): {asked} cannot be admitted now; \
         delete sandboxes or retry later"
    ))
}

/// Room held in a tenant's quota while sandboxes are created. Each created sandbox is
/// [`commit`](Reservation::commit)ted under its id; whatever is left is given back on drop.
#[derive(Debug)]
pub struct Reservation {
    ledger: Arc<Mutex<Ledger>>,
    tenant: String,
    each: Usage,
    left: usize,
}

impl Reservation {
    /// One sandbox of the reservation now exists as `id`.
    pub fn commit(&mut self, id: &str) {
        if self.left == 0 {
            return;
        }
        self.left -= 1;
        let mut ledger = self.ledger.lock().unwrap_or_else(|p| p.into_inner());
        // Its usage is already in the tenant's total: it moves from reserved to live.
        if let Some((tenant, usage)) = ledger.live.insert(id.to_string(), (self.tenant.clone(), self.each)) {
            ledger.sub(&tenant, usage);
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.left > 0 {
            let mut ledger = self.ledger.lock().unwrap_or_else(|p| p.into_inner());
            ledger.sub(&self.tenant, self.each.times(self.left));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(tenant: &str, memory_gib: u64) -> SandboxSpec {
        let mut s = SandboxSpec::new(tenant, "host");
        s.memory_bytes = Some(memory_gib << 30);
        s.cpu = Some(1.0);
        s
    }

    #[test]
    fn a_tenant_at_its_sandbox_quota_is_refused_and_others_are_not() {
        let quotas = Quotas::new(Quota { sandboxes: Some(2), ..Default::default() });
        let mut a = quotas.reserve(&spec("a", 1), 2).unwrap();
        a.commit("a1");
        a.commit("a2");
        let err = quotas.reserve(&spec("a", 1), 1).unwrap_err();
        assert!(matches!(&err, AdmissionError::OverQuota(m) if m.contains("2 sandboxes")), "{err:?}");
        quotas.reserve(&spec("b", 1), 1).unwrap();
        quotas.release("a1");
        quotas.reserve(&spec("a", 1), 1).unwrap();
    }

    #[test]
    fn reservations_in_flight_count_and_failed_creates_give_room_back() {
        let quotas = Quotas::new(Quota { memory_bytes: Some(4 << 30), ..Default::default() });
        let held = quotas.reserve(&spec("a", 3), 1).unwrap();
        assert!(quotas.reserve(&spec("a", 2), 1).is_err(), "the reservation in flight counts");
        drop(held);
        assert_eq!(quotas.usage("a"), Usage::default());
        quotas.reserve(&spec("a", 4), 1).unwrap();
    }

    #[test]
    fn cpu_quotas_and_resync_from_the_backend() {
        let mut quotas = Quotas::new(Quota::default());
        quotas.set("a", Quota { cpu: Some(2.5), ..Default::default() });
        let mut r = quotas.reserve(&spec("a", 1), 2).unwrap();
        r.commit("x");
        r.commit("y");
        assert!(quotas.reserve(&spec("a", 1), 1).is_err());
        // The backend reaped `y` on idle expiry: a resync gives its room back.
        quotas.resync([("x", "a", Some(1 << 30), Some(1.0))]);
        assert_eq!(quotas.usage("a").sandboxes, 1);
        quotas.reserve(&spec("a", 1), 1).unwrap();
    }

    #[test]
    fn quotas_parse_and_name_what_is_wrong() {
        let q = Quota::parse("sandboxes=10, memory=64Gi, cpu=500m").unwrap();
        assert_eq!(q, Quota { sandboxes: Some(10), memory_bytes: Some(64 << 30), cpu: Some(0.5) });
        assert!(Quota::parse("disks=1").unwrap_err().contains("unknown quota"));
        assert!(Quota::parse("sandboxes").unwrap_err().contains("KEY=VALUE"));
    }
}
