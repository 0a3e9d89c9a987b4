//! Per-sandbox resources: the operator's defaults for what a request leaves out, and maxima
//! that a request may not exceed.

use orchard_sandbox::SandboxSpec;

use crate::AdmissionError;

#[derive(Debug, Clone, PartialEq)]
/// Default and most resources per sandbox (`None`: no default, no limit).
pub struct ResourcePolicy {
    /// Memory given when a request names none.
    pub default_memory_bytes: Option<u64>,
    /// Most memory a request may ask for.
    pub max_memory_bytes: Option<u64>,
    /// CPU given when a request names none.
    pub default_cpu: Option<f64>,
    /// Most CPU a request may ask for.
    pub max_cpu: Option<f64>,
    /// Process limit given when a request names none.
    pub default_pids: Option<u64>,
    /// Most processes a request may ask for.
    pub max_pids: Option<u64>,
    /// Disk given when a request names none.
    pub default_disk_bytes: Option<u64>,
    /// Most disk a request may ask for.
    pub max_disk_bytes: Option<u64>,
    /// Every sandbox's hard lifetime, in seconds (a shorter one asked for is kept).
    pub max_lifetime_seconds: Option<u64>,
}

const GIB: u64 = 1 << 30;
const DAY: u64 = 24 * 3600;

impl Default for ResourcePolicy {
    /// A sandbox nobody sized still cannot take the host: 2 GiB of memory, 2 cores, 4,096
    /// processes, 10 GiB of writable layer; requests go up to 32 GiB, 16 cores, 32,768 processes
    /// and 100 GiB. No sandbox lives longer than a day.
    fn default() -> Self {
        ResourcePolicy {
            default_memory_bytes: Some(2 * GIB),
            max_memory_bytes: Some(32 * GIB),
            default_cpu: Some(2.0),
            max_cpu: Some(16.0),
            default_pids: Some(4096),
            max_pids: Some(32768),
            default_disk_bytes: Some(10 * GIB),
            max_disk_bytes: Some(100 * GIB),
            max_lifetime_seconds: Some(DAY),
        }
    }
}

impl ResourcePolicy {
    /// No defaults, no maxima: what the operator's own `orchard run` gets.
    pub fn unlimited() -> Self {
        ResourcePolicy {
            default_memory_bytes: None,
            max_memory_bytes: None,
            default_cpu: None,
            max_cpu: None,
            default_pids: None,
            max_pids: None,
            default_disk_bytes: None,
            max_disk_bytes: None,
            max_lifetime_seconds: None,
        }
    }

    /// Checks that defaults do not exceed maxima (a server that could not admit its own
    /// defaults would refuse every request that leaves a field out).
    pub fn validate(&self) -> Result<(), String> {
        let pairs = [
            ("memory", self.default_memory_bytes.map(|v| v as f64), self.max_memory_bytes.map(|v| v as f64)),
            ("cpu", self.default_cpu, self.max_cpu),
            ("pids", self.default_pids.map(|v| v as f64), self.max_pids.map(|v| v as f64)),
            ("disk", self.default_disk_bytes.map(|v| v as f64), self.max_disk_bytes.map(|v| v as f64)),
        ];
        for (name, default, max) in pairs {
            if let (Some(d), Some(m)) = (default, max)
                && d > m
            {
                return Err(format!("the default {name} is above the maximum {name}"));
            }
        }
        Ok(())
    }

    /// Fills what `spec` leaves out and refuses what is above a maximum, naming the field.
    pub fn apply(&self, spec: &mut SandboxSpec) -> Result<(), AdmissionError> {
        spec.memory_bytes = spec.memory_bytes.or(self.default_memory_bytes);
        spec.cpu = spec.cpu.or(self.default_cpu);
        spec.pids = spec.pids.or(self.default_pids);
        spec.disk_bytes = spec.disk_bytes.or(self.default_disk_bytes);
        spec.lifetime_seconds = match (spec.lifetime_seconds, self.max_lifetime_seconds) {
            (Some(asked), Some(max)) => Some(asked.min(max)),
            (asked, max) => asked.or(max),
        };
        if spec.lifetime_seconds == Some(0) {
            return Err(AdmissionError::refused("lifetime", "must be at least 1 second"));
        }
        if let (Some(asked), Some(max)) = (spec.memory_bytes, self.max_memory_bytes)
            && asked > max
        {
            return Err(above("memory", &format_bytes(asked), &format_bytes(max)));
        }
        if let (Some(asked), Some(max)) = (spec.cpu, self.max_cpu)
            && asked > max
        {
            return Err(above("cpu", &format!("{asked} cores"), &format!("{max} cores")));
        }
        if let (Some(asked), Some(max)) = (spec.pids, self.max_pids)
            && asked > max
        {
            return Err(above("pids", &format!("{asked} processes"), &format!("{max}")));
        }
        if spec.pids == Some(0) {
            return Err(AdmissionError::refused("pids", "must be at least 1"));
        }
        if let (Some(asked), Some(max)) = (spec.disk_bytes, self.max_disk_bytes)
            && asked > max
        {
            return Err(above("disk", &format_bytes(asked), &format_bytes(max)));
        }
        Ok(())
    }
}

fn above(field: &'static str, asked: &str, max: &str) -> AdmissionError {
    AdmissionError::refused(field, format!("{asked} asked for; this server allows at most {max} per sandbox"))
}

/// Bytes as people read them: `2 GiB`, `512 MiB`, `1536 B`.
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: &[(u64, &str)] = &[(1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    for (size, unit) in UNITS {
        if bytes >= *size {
            let value = bytes as f64 / *size as f64;
            return if value.fract() == 0.0 { format!("{value:.0} {unit}") } else { format!("{value:.1} {unit}") };
        }
    }
    format!("{bytes} B")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_fill_what_a_request_leaves_out() {
        let mut spec = SandboxSpec::new("t", "host");
        ResourcePolicy::default().apply(&mut spec).unwrap();
        assert_eq!(spec.memory_bytes, Some(2 * GIB));
        assert_eq!(spec.cpu, Some(2.0));
        assert_eq!(spec.pids, Some(4096));
        assert_eq!(spec.disk_bytes, Some(10 * GIB));
    }

    #[test]
    fn every_sandbox_gets_the_hard_lifetime_and_a_shorter_one_is_kept() {
        let policy = ResourcePolicy { max_lifetime_seconds: Some(600), ..ResourcePolicy::default() };
        let mut spec = SandboxSpec::new("t", "host");
        policy.apply(&mut spec).unwrap();
        assert_eq!(spec.lifetime_seconds, Some(600));
        let mut longer = SandboxSpec { lifetime_seconds: Some(6000), ..SandboxSpec::new("t", "host") };
        policy.apply(&mut longer).unwrap();
        assert_eq!(longer.lifetime_seconds, Some(600), "the operator's cap holds");
        let mut shorter = SandboxSpec { lifetime_seconds: Some(60), ..SandboxSpec::new("t", "host") };
        policy.apply(&mut shorter).unwrap();
        assert_eq!(shorter.lifetime_seconds, Some(60));
        assert_eq!(ResourcePolicy::default().max_lifetime_seconds, Some(24 * 3600));
    }

    #[test]
    fn requests_above_a_maximum_name_the_field() {
        let policy = ResourcePolicy::default();
        type Set = fn(&mut SandboxSpec);
        let cases: [(&str, Set); 4] = [
            ("memory", |s| s.memory_bytes = Some(64 * GIB)),
            ("cpu", |s| s.cpu = Some(64.0)),
            ("pids", |s| s.pids = Some(1 << 20)),
            ("disk", |s| s.disk_bytes = Some(1 << 40)),
        ];
        for (field, set) in cases {
            let mut spec = SandboxSpec::new("t", "host");
            set(&mut spec);
            match policy.apply(&mut spec) {
                Err(AdmissionError::Refused { field: f, reason }) => {
                    assert_eq!(f, field);
                    assert!(reason.contains("at most"), "{reason}");
                }
                other => panic!("{field}: {other:?}"),
            }
        }
    }

    #[test]
    fn defaults_above_maxima_are_a_configuration_error() {
        let policy =
            ResourcePolicy { default_memory_bytes: Some(8 * GIB), max_memory_bytes: Some(GIB), ..Default::default() };
        assert!(policy.validate().unwrap_err().contains("memory"));
        assert_eq!(format_bytes(3 * GIB / 2), "1.5 GiB");
    }
}
