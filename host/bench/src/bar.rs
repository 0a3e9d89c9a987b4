//! The BAR simulation (`orchard_bar::sim`) as rows of the bench's table.

use orchard_bar::sim::{Setup, all};

use crate::Row;

pub fn rows(s: &Setup) -> Vec<Row> {
    let runs = all(s);
    let line = |t: &orchard_bar::sim::Tally| format!("{:.1} mixed/1000, RMSE {:.3}", t.per_1000(), t.rmse());
    let uniform = runs[0].1.clone();
    let setup = format!("{} tasks, {} rollouts, G = {}, seed {}", s.tasks, s.rollouts, s.group, s.seed);
    runs.into_iter()
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
        .collect()
}
