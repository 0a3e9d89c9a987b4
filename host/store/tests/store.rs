//! The store against real SQLite (and, when ORCHARD_TEST_POSTGRES_URL is set, PostgreSQL): the
//! queue's claims, leases and counters behave as the service relies on.

use orchard_store::{EvalFilter, Finished, NewEval, NewRollout, RolloutFilter, Store};

fn eval(id: &str, tenant: &str, n: usize) -> NewEval {
    NewEval {
        group: false,
        id: id.into(),
        tenant: tenant.into(),
        spec: "{}".into(),
        fingerprint: "f".into(),
        k: 1,
        rollouts: (0..n)
            .map(|i| NewRollout {
                rollout_id: format!("t{i}__h__1"),
                task_id: format!("t{i}"),
                harness: "h".into(),
                attempt: 1,
            })
            .collect(),
    }
}

fn finished(status: &str, passed: bool) -> Finished {
    Finished {
        status: status.into(),
        reward: (status == "graded").then_some(if passed { 1.0 } else { 0.0 }),
        passed,
        error: (status == "error").then(|| "boom".into()),
        result: "{\"r\":1}".into(),
        trajectory: "{\"steps\":[]}".into(),
    }
}

async fn stores() -> Vec<(Store, Option<tempfile::TempDir>)> {
    let tmp = tempfile::tempdir().unwrap();
    let mut out =
        vec![(Store::open(&format!("sqlite:{}", tmp.path().join("db.sqlite").display())).await.unwrap(), Some(tmp))];
    if let Ok(url) = std::env::var("ORCHARD_TEST_POSTGRES_URL") {
        out.push((Store::open(&url).await.unwrap(), None));
    }
    out
}

#[tokio::test]
async fn claims_are_exclusive_finishes_count_and_lapsed_leases_requeue() {
    for (store, _tmp) in stores().await {
        let id = format!("e-{}", std::process::id());
        let row = store.create_eval(&eval(&id, "alice", 5)).await.unwrap();
        assert_eq!((row.total, row.queued, row.status.as_str()), (5, 5, "queued"));
        let far = 1e12;
        let a = store.claim("runner-a", &id, far, 2).await.unwrap();
        let b = store.claim("runner-b", &id, far, 2).await.unwrap();
        assert_eq!(a.len() + b.len(), 4);
        let mut all: Vec<&str> = a.iter().chain(&b).map(|c| c.rollout_id.as_str()).collect();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 4, "a rollout was claimed twice");
        let e = store.eval(&id).await.unwrap().unwrap();
        assert_eq!((e.queued, e.running, e.status.as_str()), (1, 4, "running"));
        // What fairness and quotas read, over every job (aggregates decode on both databases).
        assert_eq!(store.running_per_tenant().await.unwrap().get("alice"), Some(&4));
        assert!(
            store
                .evals_waiting()
                .await
                .unwrap()
                .iter()
                .any(|(e, t, q, r)| (e, t, *q, *r) == (&id, &"alice".to_string(), 1, 4))
        );

        // Only the holder finishes; a result lands once.
        assert!(!store.finish("runner-b", &id, &a[0].rollout_id, &finished("graded", true)).await.unwrap());
        assert!(store.finish("runner-a", &id, &a[0].rollout_id, &finished("graded", true)).await.unwrap());
        assert!(!store.finish("runner-a", &id, &a[0].rollout_id, &finished("graded", true)).await.unwrap());
        assert!(store.finish("runner-a", &id, &a[1].rollout_id, &finished("error", false)).await.unwrap());
        let e = store.eval(&id).await.unwrap().unwrap();
        assert_eq!((e.done, e.passed, e.errored, e.running), (2, 1, 1, 2));
        let (row, doc) = store.rollout(&id, &a[0].rollout_id).await.unwrap().unwrap();
        assert_eq!((row.state.as_str(), row.passed, doc.as_deref()), ("done", Some(true), Some("{\"steps\":[]}")));

        // runner-b dies: its leases lapse and its rollouts are queued again, counters with them.
        store.renew("runner-b", 0.0).await.unwrap();
        assert_eq!(store.requeue_expired().await.unwrap(), 2);
        let e = store.eval(&id).await.unwrap().unwrap();
        assert_eq!((e.queued, e.running), (3, 0));
        assert!(!store.finish("runner-b", &id, &b[0].rollout_id, &finished("graded", true)).await.unwrap());
        let c = store.claim("runner-c", &id, far, 10).await.unwrap();
        assert_eq!(c.len(), 3);
        assert!(c.iter().all(|x| x.tries >= 1));
        for claim in &c {
            assert!(store.finish("runner-c", &id, &claim.rollout_id, &finished("unknown", false)).await.unwrap());
        }
        let e = store.eval(&id).await.unwrap().unwrap();
        assert_eq!((e.done, e.unknown, e.status.as_str()), (5, 3, "done"));
        assert!(e.finished_at.is_some());

        // Retry queues the errored and unknown ones only.
        assert_eq!(store.retry(&id).await.unwrap(), 4);
        let e = store.eval(&id).await.unwrap().unwrap();
        assert_eq!((e.queued, e.done, e.passed, e.errored, e.unknown, e.status.as_str()), (4, 1, 1, 0, 0, "queued"));

        // Cancel: queued ones go at once; a running one when its runner abandons it.
        let d = store.claim("runner-d", &id, far, 1).await.unwrap();
        store.cancel(&id).await.unwrap();
        let e = store.eval(&id).await.unwrap().unwrap();
        assert_eq!((e.queued, e.running, e.cancelled, e.status.as_str()), (0, 1, 3, "cancelled"));
        assert!(store.abandon("runner-d", &id, &d[0].rollout_id).await.unwrap());
        let e = store.eval(&id).await.unwrap().unwrap();
        assert_eq!((e.running, e.cancelled), (0, 4));
        assert!(store.claim("runner-d", &id, far, 10).await.unwrap().is_empty());
    }
}

#[tokio::test]
async fn pages_cells_secrets_and_blobs() {
    for (store, _tmp) in stores().await {
        let id = format!("p-{}", std::process::id());
        store.create_eval(&eval(&id, "bob", 450)).await.unwrap();
        let page = store.rollouts(&id, &RolloutFilter { limit: 100, ..Default::default() }).await.unwrap();
        assert_eq!(page.len(), 100);
        assert_eq!(page[0].seq, 0);
        let next = store
            .rollouts(&id, &RolloutFilter { limit: 1000, after_seq: Some(page[99].seq), ..Default::default() })
            .await
            .unwrap();
        assert_eq!(next.len(), 350);
        let claims = store.claim("r", &id, 1e12, 3).await.unwrap();
        for (i, c) in claims.iter().enumerate() {
            store.finish("r", &id, &c.rollout_id, &finished("graded", i != 1)).await.unwrap();
        }
        let cells = store.cells(&id).await.unwrap();
        assert_eq!(cells.iter().map(|c| c.passed).sum::<i64>(), 2);
        // A list page leaves the result documents out unless asked for them.
        let done_only = RolloutFilter { state: Some("done".into()), limit: 10, ..Default::default() };
        let brief = store.rollouts(&id, &done_only).await.unwrap();
        assert_eq!(brief.len(), 3);
        assert!(brief.iter().all(|r| r.result.is_none() && r.reward.is_some()), "{brief:?}");
        let whole = store.rollouts(&id, &RolloutFilter { with_result: true, ..done_only.clone() }).await.unwrap();
        assert!(whole.iter().all(|r| r.result.as_deref() == Some("{\"r\":1}")), "{whole:?}");
        // A page (one packed row) says exactly what a rollout read alone says: floats to the
        // last bit (finish times carry every digit), in work order.
        for row in &whole {
            let (alone, _) = store.rollout(&id, &row.rollout_id).await.unwrap().unwrap();
            assert_eq!(format!("{row:?}"), format!("{alone:?}"));
        }
        assert!(whole.windows(2).all(|w| w[0].seq < w[1].seq));
        // A row reads back what it writes (the page's JSON), all but the result it leaves out.
        let written = serde_json::to_string(&whole[0]).unwrap();
        let back: orchard_store::RolloutRow = serde_json::from_str(&written).unwrap();
        assert_eq!(back, orchard_store::RolloutRow { result: None, ..whole[0].clone() });
        let odd = store.claim("r", &id, 1e12, 1).await.unwrap();
        let reward = 0.1 + 0.2; // 0.30000000000000004: fifteen digits do not carry it
        store
            .finish("r", &id, &odd[0].rollout_id, &Finished { reward: Some(reward), ..finished("graded", false) })
            .await
            .unwrap();
        let failed = RolloutFilter { passed: Some(false), limit: 10, ..Default::default() };
        let page = store.rollouts(&id, &failed).await.unwrap();
        assert_eq!(page.iter().map(|r| r.reward).collect::<Vec<_>>(), [Some(0.0), Some(reward)]);
        let cells = store.cells(&id).await.unwrap();
        let sum: f64 = cells.iter().map(|c| c.reward_sum).sum();
        assert_eq!(sum, 2.0 + reward);
        // Each counter lands in its own field (a packed row is read by position).
        let odd_cell = cells.iter().find(|c| c.task_id == odd[0].task_id).unwrap();
        let expected = orchard_store::TaskCell {
            task_id: odd[0].task_id.clone(),
            harness: "h".into(),
            done: 1,
            graded: 1,
            passed: 0,
            errored: 0,
            unknown: 0,
            reward_sum: reward,
        };
        assert_eq!(odd_cell, &expected);
        let back: orchard_store::TaskCell = serde_json::from_str(&serde_json::to_string(odd_cell).unwrap()).unwrap();
        assert_eq!(&back, odd_cell);
        assert!(store.rollouts("no-such-job", &failed).await.unwrap().is_empty());
        // A tenant's filters are values, never SQL, inside the packed page too; its limit is clamped.
        for hostile in ["t0' OR '1'='1", "t0\") OR 1=1 --", "%", "t0'), json_array('x"] {
            for filter in [
                RolloutFilter { task_id: Some(hostile.into()), limit: 1000, ..Default::default() },
                RolloutFilter { harness: Some(hostile.into()), limit: 1000, ..Default::default() },
                RolloutFilter { status: Some(hostile.into()), limit: 1000, ..Default::default() },
            ] {
                assert!(store.rollouts(&id, &filter).await.unwrap().is_empty(), "{filter:?}");
            }
        }
        for (limit, rows) in [(-5, 1), (0, 1), (1_000_000, 450)] {
            assert_eq!(store.rollouts(&id, &RolloutFilter { limit, ..Default::default() }).await.unwrap().len(), rows);
        }
        assert!(store.cells("no-such-job").await.unwrap().is_empty());
        // The job's page in one read: the job and its cells as read apart.
        let (job, job_cells) = store.eval_with_cells(&id).await.unwrap().unwrap();
        assert_eq!(format!("{job:?}"), format!("{:?}", store.eval(&id).await.unwrap().unwrap()));
        assert_eq!(job_cells, cells);
        assert!(store.eval_with_cells("no-such-job").await.unwrap().is_none());
        let fresh = format!("{id}-fresh");
        store.create_eval(&eval(&fresh, "bob", 2)).await.unwrap();
        let (job, job_cells) = store.eval_with_cells(&fresh).await.unwrap().unwrap();
        assert_eq!((job.id.as_str(), job.total, job_cells.len()), (fresh.as_str(), 2, 0));
        // A page that checks its owner: the owner's rows, nothing for anyone else.
        let owned_by = |tenant: &str| RolloutFilter { tenant: Some(tenant.into()), limit: 1000, ..Default::default() };
        assert_eq!(store.rollouts(&id, &owned_by("bob")).await.unwrap().len(), 450);
        let passed_of_bob = RolloutFilter { passed: Some(true), ..owned_by("bob") };
        assert_eq!(store.rollouts(&id, &passed_of_bob).await.unwrap().len(), 2);
        for other in ["alice", "", "bob' OR '1'='1", "%"] {
            assert!(store.rollouts(&id, &owned_by(other)).await.unwrap().is_empty(), "{other:?}");
        }
        let done = store.finished_since(&id, 0, 10).await.unwrap();
        assert_eq!(done.len(), 4);
        assert!(store.finished_since(&id, done[3].finish_seq.unwrap(), 10).await.unwrap().is_empty());
        let results = store.results_page(&id, -1, 10).await.unwrap();
        assert_eq!(results.len(), 4);
        assert!(results.iter().all(|(_, doc)| doc.is_some()));
        let listed = store.list_evals("bob", &EvalFilter { limit: 10, ..Default::default() }).await.unwrap();
        assert!(listed.iter().any(|e| e.id == id));
        assert!(store.list_evals("nobody", &EvalFilter { limit: 10, ..Default::default() }).await.unwrap().is_empty());

        // Floats through a page to the last bit, at the edges of what a double holds.
        let floats = format!("{id}-floats");
        let tricky = [2.0 / 3.0, 1e-300, 5e-324, f64::MAX, -0.1, 123456789.12345679, 1e21, 0.1 + 0.7];
        store.create_eval(&eval(&floats, "bob", tricky.len())).await.unwrap();
        for (claim, reward) in store.claim("r", &floats, 1e12, tricky.len() as i64).await.unwrap().iter().zip(tricky) {
            let finish = Finished { reward: Some(reward), ..finished("graded", false) };
            store.finish("r", &floats, &claim.rollout_id, &finish).await.unwrap();
        }
        let page = store.rollouts(&floats, &RolloutFilter { limit: 100, ..Default::default() }).await.unwrap();
        let mut read: Vec<f64> = page.iter().map(|r| r.reward.unwrap()).collect();
        let mut wrote = tricky.to_vec();
        // Each task has one rollout here: its cell's sum is that reward.
        let mut summed: Vec<f64> = store.cells(&floats).await.unwrap().iter().map(|c| c.reward_sum).collect();
        let bits = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v.iter().map(|f| f.to_bits()).collect::<Vec<_>>()
        };
        let wrote = bits(&mut wrote);
        assert_eq!(bits(&mut read), wrote, "rewards through a page");
        assert_eq!(bits(&mut summed), wrote, "reward sums through the cells");

        store.put_secret("bob", "openai", "sk-1").await.unwrap();
        store.put_secret("bob", "openai", "sk-2").await.unwrap();
        assert_eq!(store.secret("bob", "openai").await.unwrap().as_deref(), Some("sk-2"));
        assert_eq!(store.secret("alice", "openai").await.unwrap(), None);
        assert_eq!(store.secret_names("bob").await.unwrap(), ["openai"]);
        assert!(store.delete_secret("bob", "openai").await.unwrap());

        let blob = format!("sha256:{id}");
        store.put_blob(&blob, "bob", b"\x1f\x8b archive").await.unwrap();
        store.put_blob(&blob, "bob", b"ignored").await.unwrap();
        assert_eq!(store.blob(&blob).await.unwrap(), Some(("bob".into(), b"\x1f\x8b archive".to_vec())));
    }
}

#[tokio::test]
async fn rollouts_recorded_from_outside_the_queue_arrive_finished_and_are_never_claimed() {
    for (store, _tmp) in stores().await {
        let id = format!("oe-{}", std::process::id());
        assert!(store.create_open_eval(&eval(&id, "alice", 1)).await.is_err(), "an open job starts empty");
        let row = store.create_open_eval(&eval(&id, "alice", 0)).await.unwrap();
        assert_eq!((row.total, row.status.as_str()), (0, "done"));
        for (i, passed) in [true, false].into_iter().enumerate() {
            let rollout = NewRollout {
                rollout_id: format!("t__openenv__{}", i + 1),
                task_id: "t".into(),
                harness: "openenv".into(),
                attempt: i as u32 + 1,
            };
            store.record_finished(&id, &rollout, &finished("graded", passed)).await.unwrap();
            assert!(store.claim("runner", &id, 1e12, 10).await.unwrap().is_empty(), "nothing to claim");
        }
        let e = store.eval(&id).await.unwrap().unwrap();
        assert_eq!((e.total, e.done, e.passed, e.queued, e.running, e.status.as_str()), (2, 2, 1, 0, 0, "done"));
        let rows = store.rollouts(&id, &RolloutFilter { limit: 10, ..Default::default() }).await.unwrap();
        assert_eq!(rows.iter().map(|r| r.reward).collect::<Vec<_>>(), [Some(1.0), Some(0.0)]);
        assert!(store.record_finished("no-such-job", &rows_rollout(), &finished("graded", true)).await.is_err());
        store.delete_eval(&id).await.unwrap();
    }
}

fn rows_rollout() -> NewRollout {
    NewRollout { rollout_id: "x__openenv__1".into(), task_id: "x".into(), harness: "openenv".into(), attempt: 1 }
}
