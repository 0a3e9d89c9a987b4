//! Any bytes as the reward files a task's tests wrote: the `script` grader's reading of them
//! gives a finite reward or a reason, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../graders/script/src/reward.rs"]
mod reward;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else { return };
    let text = String::from_utf8_lossy(rest);
    let (txt, json) = match pick % 3 {
        0 => (Some(text.as_ref()), None),
        1 => (None, Some(text.as_ref())),
        _ => (None, None),
    };
    match reward::read(txt, json) {
        Ok((r, subs)) => {
            assert!(r.is_finite());
            assert!(subs.iter().all(|(_, v)| v.is_finite()));
        }
        Err(reason) => assert!(!reason.is_empty()),
    }
});
