//! The BAR simulation (`orchard_bar::sim`) as rows of the bench's table.

use orchard_bar::sim::{Setup, Tally, all, requests};
use orchard_bar::{GroupConfig, Prior};

use crate::Row;

/// As the service runs BAR: a fresh set of 200 tasks, requests of one pass each under a budget of
/// 1,600 rollouts, 20 worlds summed — BAR growing G at once (abandon below 0.1) and BAR as the
/// service now grows groups (a probe of G/4, the opportunity cost), beside uniform.
fn service_like() -> Vec<Row> {
    let mut sums: [Tally; 6] = Default::default();
    let grown = GroupConfig { first: Some(2), opportunity: orchard_bar::DEFAULT_OPPORTUNITY, ..GroupConfig::new(8) };
    for seed in 1..=20 {
        let s = Setup { tasks: 200, rollouts: 1600, seed, drift: 0.0, ..Default::default() };
        let (u1, u2) = requests(&s, Prior::default(), None);
        let (b1, b2) = requests(&s, Prior::default(), Some(GroupConfig::new(8)));
        let (g1, g2) = requests(&s, Prior::default(), Some(grown));
        for (sum, t) in sums.iter_mut().zip([u1, u2, b1, b2, g1, g2]) {
            sum.mixed += t.mixed;
            sum.rollouts += t.rollouts;
        }
    }
    let uniform = (sums[0].mixed + sums[1].mixed) as f64 * 1000.0 / (sums[0].rollouts + sums[1].rollouts) as f64;
    let reference = format!("uniform {uniform:.1}, same worlds");
    let row = |what: &str, t: &Tally, target: Option<f64>| Row {
        what: format!("bar sim, service-like (200 fresh tasks, 1,600 rollouts, 20 worlds): {what}"),
        ours: format!("{:.1} mixed/1000 = {:.2}× uniform", t.per_1000(), t.per_1000() / uniform),
        reference: reference.clone(),
        target: target.map(|x| format!("≥ {x}×")).unwrap_or_else(|| "—".into()),
        met: target.map(|x| t.per_1000() / uniform >= x),
    };
    vec![
        row("BAR growing G at once, first request", &sums[2], None),
        row("BAR growing G at once, later requests", &sums[3], None),
        row("BAR with probe + opportunity cost, first request", &sums[4], None),
        row("BAR with probe + opportunity cost, later requests", &sums[5], Some(1.4)),
    ]
}

pub fn rows(s: &Setup) -> Vec<Row> {
    let runs = all(s);
    let line = |t: &orchard_bar::sim::Tally| format!("{:.1} mixed/1000, RMSE {:.3}", t.per_1000(), t.rmse());
    let uniform = runs[0].1.clone();
    let setup = format!("{} tasks, {} rollouts, G = {}, seed {}", s.tasks, s.rollouts, s.group, s.seed);
    let mut rows: Vec<Row> = runs
        .into_iter()
        .map(|(name, t)| {
            let (reference, target, met) = match name {
                "uniform / DAPO's filter" => ("published ≈ 62".to_string(), "—", None),
                "GRESO's skipping" => ("published ≈ 70".into(), "—", None),
                "BAR" => (
                    format!("{:.1} uniform, same run", uniform.per_1000()),
                    "≥ 80, RMSE ≤ 0.115",
                    Some(t.per_1000() >= 80.0 && t.rmse() <= 0.115),
                ),
                "BAR, balanced mode" => (
                    format!("{:.0} % balanced uniform", uniform.balanced_share() * 100.0),
                    "≥ 70, ≥ 85 % balanced",
                    Some(t.per_1000() >= 70.0 && t.balanced_share() >= 0.85),
                ),
                n if n.starts_with("BAR, a wrong prior") => {
                    (format!("{:.1} uniform", uniform.per_1000()), "≥ 80", Some(t.per_1000() >= 80.0))
                }
                _ => ("—".into(), "—", None),
            };
            let ours = if name == "BAR, balanced mode" {
                format!("{}, {:.0} % balanced", line(&t), t.balanced_share() * 100.0)
            } else {
                line(&t)
            };
            Row { what: format!("bar sim ({setup}): {name}"), ours, reference, target: target.into(), met }
        })
        .collect();
    rows.extend(service_like());
    rows
}
