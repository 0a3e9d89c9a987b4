//! Two jobs side by side: per task and harness, each job's pass rate and mean reward, what
//! flipped between them, and paired totals over what both ran.

use std::collections::BTreeMap;

use askama::Template;
use axum::extract::State;
use axum::response::Response;
use orchard_evals_api::{CellView, Query};
use serde::Deserialize;

use crate::format::{num, pct};
use crate::jobs::JobRow;
use crate::{Layout, S, Signed, api_error, render};

#[derive(Deserialize)]
pub struct CompareQuery {
    a: Option<String>,
    b: Option<String>,
}

pub struct PairRow {
    pub task: String,
    pub harness: String,
    pub a: String,
    pub b: String,
    pub a_mean: String,
    pub b_mean: String,
    /// `fixed`, `broke`, or empty.
    pub flip: &'static str,
}

pub struct Totals {
    pub paired: usize,
    pub a_passed: usize,
    pub b_passed: usize,
    pub fixed: usize,
    pub broke: usize,
    pub only_a: usize,
    pub only_b: usize,
    pub a_mean: String,
    pub b_mean: String,
}

#[derive(Template)]
#[template(path = "compare.html")]
struct ComparePage {
    layout: Layout,
    jobs: Vec<JobRow>,
    a: String,
    b: String,
    rows: Vec<PairRow>,
    totals: Option<Totals>,
}

/// A cell's pass rate over its graded rollouts (errored and unknown apart, as everywhere).
fn rate(c: &CellView) -> Option<f64> {
    let graded = c.done - c.unknown - c.errored;
    (graded > 0).then(|| c.passed as f64 / graded as f64)
}

fn harness_name(id: &str) -> &str {
    id.split('@').next().unwrap_or(id)
}

async fn cells(
    state: &crate::UiState,
    signed: &Signed,
    id: &str,
) -> Result<BTreeMap<(String, String), CellView>, Response> {
    let eval = orchard_evals_api::owned(&state.service, &signed.tenant, id).await.map_err(api_error)?;
    let cells = state.service.env.store.cells(id).await.map_err(|e| api_error(e.into()))?;
    let (_, matrix) = orchard_evals_api::summary_of(&eval, &cells);
    Ok(matrix.cells.into_iter().map(|c| ((c.task_id.clone(), harness_name(&c.harness).to_string()), c)).collect())
}

pub async fn page(State(state): S, signed: Signed, Query(q): Query<CompareQuery>) -> Response {
    let jobs = match crate::jobs::recent(&state, &signed).await {
        Ok(jobs) => jobs,
        Err(r) => return r,
    };
    let (a, b) = (q.a.unwrap_or_default(), q.b.unwrap_or_default());
    let mut rows = Vec::new();
    let mut totals = None;
    if !a.is_empty() && !b.is_empty() {
        let (mut ca, mut cb) = match (cells(&state, &signed, &a).await, cells(&state, &signed, &b).await) {
            (Ok(ca), Ok(cb)) => (ca, cb),
            (Err(r), _) | (_, Err(r)) => return r,
        };
        // One harness each, and not the same one (two harnesses, or two models, on the same
        // tasks): pair by task.
        let only = |c: &BTreeMap<(String, String), CellView>| {
            let names: std::collections::BTreeSet<&String> = c.keys().map(|k| &k.1).collect();
            (names.len() == 1).then(|| names.into_iter().next().cloned()).flatten()
        };
        if let (Some(ha), Some(hb)) = (only(&ca), only(&cb))
            && ha != hb
        {
            let label = format!("{ha} / {hb}");
            let by_task = |c: BTreeMap<(String, String), CellView>| {
                c.into_iter().map(|((task, _), v)| ((task, label.clone()), v)).collect::<BTreeMap<_, _>>()
            };
            ca = by_task(ca);
            cb = by_task(cb);
        }
        let mut t = Totals {
            paired: 0,
            a_passed: 0,
            b_passed: 0,
            fixed: 0,
            broke: 0,
            only_a: ca.keys().filter(|k| !cb.contains_key(*k)).count(),
            only_b: cb.keys().filter(|k| !ca.contains_key(*k)).count(),
            a_mean: String::new(),
            b_mean: String::new(),
        };
        let (mut sum_a, mut sum_b, mut n_mean) = (0.0, 0.0, 0usize);
        for (key, x) in &ca {
            let Some(y) = cb.get(key) else { continue };
            let (ra, rb) = (rate(x), rate(y));
            let (pa, pb) = (ra.is_some_and(|r| r >= 0.5), rb.is_some_and(|r| r >= 0.5));
            t.paired += 1;
            t.a_passed += usize::from(pa);
            t.b_passed += usize::from(pb);
            let flip = match (pa, pb) {
                (false, true) if ra.is_some() => "fixed",
                (true, false) if rb.is_some() => "broke",
                _ => "",
            };
            t.fixed += usize::from(flip == "fixed");
            t.broke += usize::from(flip == "broke");
            if let (Some(ma), Some(mb)) = (x.mean_reward, y.mean_reward) {
                sum_a += ma;
                sum_b += mb;
                n_mean += 1;
            }
            rows.push(PairRow {
                task: key.0.clone(),
                harness: key.1.clone(),
                a: pct(ra),
                b: pct(rb),
                a_mean: num(x.mean_reward),
                b_mean: num(y.mean_reward),
                flip,
            });
        }
        let mean = |sum: f64| (n_mean > 0).then(|| sum / n_mean as f64);
        t.a_mean = num(mean(sum_a));
        t.b_mean = num(mean(sum_b));
        totals = Some(t);
    }
    render(&ComparePage { layout: signed.layout("Compare"), jobs, a, b, rows, totals })
}
