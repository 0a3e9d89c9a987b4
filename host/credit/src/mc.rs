//! Monte Carlo values: `V(t)`, the mean reward of K continuations by the policy from the state
//! after turn `t` (reached by replaying the recorded tool calls into a fresh sandbox — the react
//! harness's `resume` config). Each `V(t)` costs K rollouts, so the curve is searched rather than
//! sampled at every turn: a coarse grid of turns, then bisection toward where the value rose to
//! its peak and where it fell after it.

use std::future::Future;

use serde_json::{Value, json};

/// The first `t` assistant turns of a trajectory line, as the react harness's `resume` takes them.
pub fn resume_turns(rollout: &Value, t: usize) -> Value {
    let turns: Vec<Value> = rollout["trajectory"]["conversation"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "assistant")
        .take(t)
        .map(|m| {
            let content: String = m["content"]
                .as_array()
                .map(|parts| parts.iter().filter_map(|p| p["text"].as_str()).collect())
                .unwrap_or_default();
            let calls: Vec<Value> = m["tool_calls"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| json!({"id": c["id"], "name": c["name"], "arguments": c["arguments"]}))
                .collect();
            json!({"content": content, "tool_calls": calls})
        })
        .collect();
    Value::Array(turns)
}

/// `V` over turns `0..=n`, evaluated at `points` grid turns (at least 0 and `n`), then refined
/// by bisection on both sides of the best one: toward the turn where it was first reached (the
/// rise) and the turn after which it falls. Turns never evaluated are `None`.
pub async fn mc_curve<F, Fut, E>(n: usize, points: usize, mut value: F) -> Result<Vec<Option<f64>>, E>
where
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = Result<f64, E>>,
{
    let mut curve: Vec<Option<f64>> = vec![None; n + 1];
    let points = points.max(2);
    let mut grid: Vec<usize> = (0..points).map(|i| (i * n + (points - 1) / 2) / (points - 1)).collect();
    grid.dedup();
    for t in grid {
        if curve[t].is_none() {
            curve[t] = Some(value(t).await?);
        }
    }
    let best = |curve: &[Option<f64>]| {
        curve
            .iter()
            .enumerate()
            .filter_map(|(t, v)| v.map(|v| (t, v)))
            .fold((0, f64::MIN), |b, (t, v)| if v > b.1 { (t, v) } else { b })
    };
    // Left: where the peak's value was first reached.
    loop {
        let (peak, top) = best(&curve);
        let Some(left) = (0..peak).rev().find(|t| curve[*t].is_some()) else { break };
        if peak - left <= 1 {
            break;
        }
        let mid = (left + peak) / 2;
        let v = value(mid).await?;
        curve[mid] = Some(v);
        if v < top && peak - mid <= 1 {
            break;
        }
    }
    // Right: where it falls.
    loop {
        let (peak, _) = best(&curve);
        let Some(right) = (peak + 1..=n).find(|t| curve[*t].is_some()) else { break };
        if right - peak <= 1 {
            break;
        }
        let mid = (peak + right) / 2;
        curve[mid] = Some(value(mid).await?);
    }
    Ok(curve)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Credit;

    fn run(truth: &[f64], points: usize) -> (Vec<Option<f64>>, usize) {
        let mut calls = 0;
        let curve = tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(mc_curve(
            truth.len() - 1,
            points,
            |t| {
                calls += 1;
                let v = truth[t];
                async move { Ok::<_, ()>(v) }
            },
        ));
        (curve.unwrap(), calls)
    }

    #[test]
    fn the_search_finds_the_rise_and_the_fall_without_sampling_every_turn() {
        // Rises at turns 9 and 10, falls after 13, on 21 turns.
        let mut truth = vec![0.0; 21];
        truth[9] = 0.5;
        for v in &mut truth[10..=13] {
            *v = 1.0;
        }
        let (curve, calls) = run(&truth, 5);
        assert!(calls < 12, "{calls} evaluations for 21 turns");
        let credit = Credit::from_sparse_curve("mc", curve.clone());
        let credited: Vec<usize> = (1..=20).filter(|t| credit.credited[t - 1]).collect();
        assert!(credited.contains(&10), "the turn that reached the peak: {credited:?} {curve:?}");
        assert!(credited.iter().all(|t| *t <= 13 && *t >= 6), "{credited:?} {curve:?}");
        // Every turn sampled when the grid covers them all: exactly the dense answer.
        let (dense, _) = run(&[0.0, 1.0, 1.0, 0.0, 0.0], 5);
        assert_eq!(Credit::from_sparse_curve("mc", dense).credited, vec![true, false, false, false]);
    }
}
