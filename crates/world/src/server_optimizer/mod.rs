//! Server optimizers (`server_optimizer:`): how the server moves the global model once a
//! round's updates are combined (Reddi et al. 2021, "Adaptive Federated Optimization",
//! Algorithm 2; FedAvgM, Hsu et al. 2019), the catalogue [`SERVER_OPTIMIZERS`].
//!
//! The algorithm's own aggregation makes x̄ from the global vector x; the pseudo-gradient
//! Δ = x̄ − x is the round's combined change, and the optimizer steps x along it with what it
//! keeps for the vector between rounds ([`Moments`]). `sgd` at lr 1 is x̄ itself (plain
//! averaging, the same bits as no optimizer).
//!
//! This room is arithmetic on one vector, its aggregate and its moments, coordinate by
//! coordinate in f64: it draws no random number and never knows when a round happens (the
//! server applies it, after the aggregation and any privacy noise).

mod adagrad;
mod adam;
mod catalogue;
mod momentum;
mod sgd;
mod yogi;

pub use adagrad::AdagradSpec;
pub use adam::AdamSpec;
pub use catalogue::{
    Registration as ServerOptimizerRegistration, ServerOptimizerSettings, ServerOptimizerSpec,
    ServerOptimizers, SERVER_OPTIMIZERS,
};
pub use momentum::MomentumSpec;
pub use sgd::SgdSpec;
pub use yogi::YogiSpec;

/// What a server optimizer keeps for one vector of the global model between rounds: the first
/// moment m (FedAvgM's momentum buffer) and the second moment v of Reddi et al.'s Algorithm 2,
/// each empty until the first step that needs it.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Moments {
    pub first: Vec<f32>,
    pub second: Vec<f32>,
}

/// Reddi et al.'s adaptive step, coordinate by coordinate: m ← β₁m + (1 − β₁)Δ, v ←
/// `second(v, Δ²)`, x ← x + η·m / (√v + τ), from m = 0 and v = τ² (Algorithm 2's least
/// allowed start, v₋₁ ≥ τ²); written into `aggregate`, which held x̄ = x + Δ.
fn adaptive_step(
    global: &[f32],
    aggregate: &mut [f32],
    moments: &mut Moments,
    (lr, beta1, tau): (f64, f64, f64),
    second: impl Fn(f64, f64) -> f64,
) {
    let n = global.len();
    moments.first.resize(n, 0.0);
    if moments.second.len() != n {
        moments.second = vec![(tau * tau) as f32; n];
    }
    let coordinates = global.iter().zip(aggregate.iter_mut());
    for ((x, a), (m, v)) in coordinates.zip(moments.first.iter_mut().zip(&mut moments.second)) {
        let delta = *a as f64 - *x as f64;
        let m_next = beta1 * *m as f64 + (1.0 - beta1) * delta;
        let v_next = second(*v as f64, delta * delta);
        *a = (*x as f64 + lr * m_next / (v_next.sqrt() + tau)) as f32;
        *m = m_next as f32;
        *v = v_next as f32;
    }
}

/// `betas` (each in [0, 1)) and `tau` (positive), checked for the adaptive optimizers.
fn check_adaptive(lr: f64, betas: &[f64], tau: f64) -> Result<(), crate::settings::FieldError> {
    use crate::settings::FieldError;
    FieldError::positive("lr", lr)?;
    FieldError::positive("tau", tau)?;
    let field = if betas.len() == 1 { "beta1" } else { "betas" };
    match betas.iter().find(|b| !(0.0..1.0).contains(*b)) {
        Some(b) => Err(FieldError::new(
            field.into(),
            format!("each must be in [0, 1), got {b}"),
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn optimizer(text: &str) -> ServerOptimizerSpec {
        serde_yaml::from_str(text).unwrap()
    }

    /// The vectors `text`'s optimizer makes from x = `global` over rounds whose aggregates
    /// are x + Δ for each Δ of `deltas` (the same Δ for every coordinate's offset).
    fn steps(text: &str, global: &[f32], deltas: &[f32]) -> Vec<Vec<f32>> {
        let optimizer = optimizer(text);
        let mut moments = Moments::default();
        let mut x = global.to_vec();
        deltas
            .iter()
            .map(|d| {
                let mut aggregate: Vec<f32> = x.iter().map(|v| v + d).collect();
                optimizer.step(&x, &mut aggregate, &mut moments);
                x = aggregate;
                x.clone()
            })
            .collect()
    }

    #[test]
    fn sgd_at_lr_one_is_the_aggregate_itself() {
        let global = [0.25f32, -3.0, 7.25];
        let mut aggregate = vec![0.75f32, 1e-8, 7.0];
        let kept = aggregate.clone();
        optimizer("{kind: sgd}").step(&global, &mut aggregate, &mut Moments::default());
        assert_eq!(aggregate, kept);
        // At 0.5, half-way: 0.25 + 0.25 = 0.5, −3 + 0.5·(3 + 1e-8) = −1.5 (to f32), 7.25 −
        // 0.125.
        optimizer("{kind: sgd, lr: 0.5}").step(&global, &mut aggregate, &mut Moments::default());
        assert_eq!(aggregate, [0.5, -1.5, 7.125]);
    }

    #[test]
    fn momentum_by_hand() {
        // v = Δ = 1, x = 1; v = 0.5·1 + 1 = 1.5, x = 2.5; v = 0.5·1.5 − 2 = −1.25, x = 1.25.
        let x = steps("{kind: momentum, beta: 0.5}", &[0.0], &[1.0, 1.0, -2.0]);
        assert_eq!(x, [[1.0], [2.5], [1.25]]);
        // With lr 0.5: half of each move.
        let x = steps("{kind: momentum, beta: 0.5, lr: 0.5}", &[0.0], &[2.0]);
        assert_eq!(x, [[1.0]]);
    }

    #[test]
    fn adaptive_optimizers_by_hand() {
        // τ = 0.5, β₁ = 0.5, β₂ = 0.75, η = 1; from x = 0 with Δ = 1, then Δ = 1 again (from
        // the new x), v₋₁ = τ² = 0.25.
        // Round 1: m = 0.5. Adam v = 0.75·0.25 + 0.25 = 0.4375; Yogi v = 0.25 + 0.25·1 = 0.5
        // (v < Δ² grows); Adagrad v = 0.25 + 1 = 1.25.
        let adam = steps(
            "{kind: adam, lr: 1, betas: [0.5, 0.75], tau: 0.5}",
            &[0.0],
            &[1.0],
        );
        let want = 0.5 / (0.4375f64.sqrt() + 0.5);
        assert_eq!(adam, [[want as f32]]);
        let yogi = steps(
            "{kind: yogi, lr: 1, betas: [0.5, 0.75], tau: 0.5}",
            &[0.0],
            &[1.0],
        );
        assert_eq!(yogi, [[(0.5 / (0.5f64.sqrt() + 0.5)) as f32]]);
        let adagrad = steps(
            "{kind: adagrad, lr: 1, beta1: 0.5, tau: 0.5}",
            &[0.0],
            &[1.0],
        );
        assert_eq!(adagrad, [[(0.5 / (1.25f64.sqrt() + 0.5)) as f32]]);
        // Yogi's v grows while v < Δ² and shrinks after (Δ = 2, 2, then 0.5): v = 0.25 +
        // 0.25·4 = 1.25, then 1.25 + 1 = 2.25, then 2.25 − 0.25·0.25 = 2.1875; m = 1, then
        // 0.5·1 + 0.5·2 = 1.5, then 0.5·1.5 + 0.5·0.5 = 1.
        let yogi = optimizer("{kind: yogi, lr: 1, betas: [0.5, 0.75], tau: 0.5}");
        let mut moments = Moments::default();
        for d in [2.0, 2.0, 0.5] {
            yogi.step(&[0.0], &mut [d], &mut moments);
        }
        assert_eq!(moments.second, [2.1875]);
        assert_eq!(moments.first, [1.0]);
    }

    #[test]
    fn adam_moves_each_coordinate_by_at_most_about_its_rate() {
        // Adam's first step is scale-free: η(1 − β₁)Δ / (√(1 − β₂)|Δ| + τ) ≈ η for β₁ = 0.9,
        // β₂ = 0.99 and τ ≪ |Δ|, whether Δ is 1e-4 or 1e4.
        let mut aggregate = [1e-4f32, 1e4];
        let adam = optimizer("{kind: adam, lr: 0.01, tau: 1e-9}");
        adam.step(&[0.0, 0.0], &mut aggregate, &mut Moments::default());
        for moved in aggregate {
            assert!((moved - 0.01).abs() < 1e-6, "{moved}");
        }
    }

    #[test]
    fn bad_settings_name_their_field() {
        let err = |t: &str| optimizer(t).validate().unwrap_err().path;
        assert_eq!(err("{kind: sgd, lr: 0}"), "lr");
        assert_eq!(err("{kind: momentum, beta: 1}"), "beta");
        assert_eq!(err("{kind: adam, lr: 0.1, betas: [0.9, 1.0]}"), "betas");
        assert_eq!(err("{kind: yogi, lr: 0.1, tau: 0}"), "tau");
        assert_eq!(err("{kind: adagrad, lr: -1}"), "lr");
        assert_eq!(err("{kind: adagrad, lr: 1, beta1: -0.1}"), "beta1");
    }
}
