//! `cargo run -p orchard-bar --example sim --release`: the BAR simulation's numbers.

fn main() {
    let s = orchard_bar::sim::Setup::default();
    for (name, t) in orchard_bar::sim::all(&s) {
        println!(
            "{name:45} {:6.1} mixed/1000  RMSE {:.3}  balanced {:3.0} %  rollouts {}",
            t.per_1000(),
            t.rmse(),
            t.balanced_share() * 100.0,
            t.rollouts
        );
    }
}
