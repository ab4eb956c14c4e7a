//! numpy's legacy `RandomState` (MT19937), for the few draws the FedEM authors' data generator
//! makes, so that `numpy_seed` rebuilds their data set exactly.
//!
//! Re-implemented from numpy's published algorithms (numpy/random/src: `mt19937.c`,
//! `legacy-distributions.c`, `distributions.c`; BSD-3-Clause): Knuth seeding of MT19937, the
//! 53-bit double, the legacy polar Gaussian with its cached second value, the legacy gamma
//! (Dirichlet), inversion/BTPE binomials (multinomial) and masked rejection for bounded
//! integers (`shuffle`). Unit tests compare with values printed by numpy itself.

const N: usize = 624;
const M: usize = 397;

/// MT19937's output function.
#[inline(always)]
fn temper(mut y: u32) -> u32 {
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c_5680;
    y ^= (y << 15) & 0xefc6_0000;
    y ^ (y >> 18)
}

/// numpy's double from two words: 27 bits of `a` and 26 of `b`.
#[inline(always)]
fn double_of(a: u32, b: u32) -> f64 {
    let (a, b) = ((a >> 5) as f64, (b >> 6) as f64);
    (a * 67_108_864.0 + b) / 9_007_199_254_740_992.0
}

#[derive(Clone)]
pub struct NumpyRandomState {
    key: [u32; N],
    pos: usize,
    gauss: Option<f64>,
}

impl NumpyRandomState {
    /// `numpy.random.seed(seed)` for an integer seed.
    pub fn new(seed: u32) -> Self {
        let mut key = [0u32; N];
        let mut s = seed;
        for (pos, k) in key.iter_mut().enumerate() {
            *k = s;
            s = 1_812_433_253u32
                .wrapping_mul(s ^ (s >> 30))
                .wrapping_add(pos as u32 + 1);
        }
        NumpyRandomState {
            key,
            pos: N,
            gauss: None,
        }
    }

    #[cold]
    #[inline(never)]
    fn generate(&mut self) {
        const UPPER: u32 = 0x8000_0000;
        const LOWER: u32 = 0x7fff_ffff;
        const MATRIX_A: u32 = 0x9908_b0df;
        let twist = |a: u32, b: u32, c: u32| {
            let y = (a & UPPER) | (b & LOWER);
            c ^ (y >> 1) ^ (0u32.wrapping_sub(y & 1) & MATRIX_A)
        };
        for i in 0..N - M {
            self.key[i] = twist(self.key[i], self.key[i + 1], self.key[i + M]);
        }
        for i in N - M..N - 1 {
            self.key[i] = twist(self.key[i], self.key[i + 1], self.key[i + M - N]);
        }
        self.key[N - 1] = twist(self.key[N - 1], self.key[0], self.key[M - 1]);
        self.pos = 0;
    }

    #[inline(always)]
    pub fn next_u32(&mut self) -> u32 {
        if self.pos == N {
            self.generate();
        }
        let y = self.key[self.pos];
        self.pos += 1;
        temper(y)
    }

    /// A double in [0, 1) from 53 random bits.
    #[inline(always)]
    pub fn next_double(&mut self) -> f64 {
        let a = self.next_u32();
        let b = self.next_u32();
        double_of(a, b)
    }

    pub fn uniform(&mut self, low: f64, high: f64) -> f64 {
        low + (high - low) * self.next_double()
    }

    /// `out.len()` draws of [`Self::uniform`], in order: the same values, taken a block of the
    /// state at a time.
    pub fn fill_uniform(&mut self, out: &mut [f64], low: f64, high: f64) {
        let mut at = 0;
        while at < out.len() {
            if self.pos + 2 > N {
                // A draw that needs the next block (or straddles it).
                out[at] = self.uniform(low, high);
                at += 1;
                continue;
            }
            let pairs = ((N - self.pos) / 2).min(out.len() - at);
            let words = &self.key[self.pos..self.pos + 2 * pairs];
            for (o, w) in out[at..at + pairs].iter_mut().zip(words.chunks_exact(2)) {
                *o = low + (high - low) * double_of(temper(w[0]), temper(w[1]));
            }
            self.pos += 2 * pairs;
            at += pairs;
        }
    }

    /// Moves the state past `n` draws of [`Self::uniform`] without making them (their words
    /// are still generated: MT19937 has no cheaper way ahead). A copy of the state taken
    /// before makes them later, elsewhere.
    pub fn skip_uniform(&mut self, n: usize) {
        let mut words = 2 * n;
        while words > 0 {
            if self.pos == N {
                self.generate();
            }
            let take = (N - self.pos).min(words);
            self.pos += take;
            words -= take;
        }
    }

    fn gauss(&mut self) -> f64 {
        if let Some(g) = self.gauss.take() {
            return g;
        }
        loop {
            let x1 = 2.0 * self.next_double() - 1.0;
            let x2 = 2.0 * self.next_double() - 1.0;
            let r2 = x1 * x1 + x2 * x2;
            if r2 < 1.0 && r2 != 0.0 {
                let f = (-2.0 * r2.ln() / r2).sqrt();
                self.gauss = Some(f * x1);
                return f * x2;
            }
        }
    }

    pub fn normal(&mut self, loc: f64, scale: f64) -> f64 {
        loc + scale * self.gauss()
    }

    pub fn lognormal(&mut self, mean: f64, sigma: f64) -> f64 {
        self.normal(mean, sigma).exp()
    }

    fn standard_exponential(&mut self) -> f64 {
        -(1.0 - self.next_double()).ln()
    }

    fn standard_gamma(&mut self, shape: f64) -> f64 {
        if shape == 1.0 {
            return self.standard_exponential();
        }
        if shape == 0.0 {
            return 0.0;
        }
        if shape < 1.0 {
            loop {
                let u = self.next_double();
                let v = self.standard_exponential();
                if u <= 1.0 - shape {
                    let x = u.powf(1.0 / shape);
                    if x <= v {
                        return x;
                    }
                } else {
                    let y = -((1.0 - u) / shape).ln();
                    let x = (1.0 - shape + shape * y).powf(1.0 / shape);
                    if x <= v + y {
                        return x;
                    }
                }
            }
        }
        let b = shape - 1.0 / 3.0;
        let c = 1.0 / (9.0 * b).sqrt();
        loop {
            let (mut x, mut v);
            loop {
                x = self.gauss();
                v = 1.0 + c * x;
                if v > 0.0 {
                    break;
                }
            }
            v = v * v * v;
            let u = self.next_double();
            if u < 1.0 - 0.0331 * (x * x) * (x * x) {
                return b * v;
            }
            if u.ln() < 0.5 * x * x + b * (1.0 - v + v.ln()) {
                return b * v;
            }
        }
    }

    pub fn dirichlet(&mut self, alpha: &[f64]) -> Vec<f64> {
        let g: Vec<f64> = alpha.iter().map(|&a| self.standard_gamma(a)).collect();
        let inv = 1.0 / g.iter().sum::<f64>();
        g.into_iter().map(|v| v * inv).collect()
    }

    fn binomial_inversion(&mut self, n: i64, p: f64) -> i64 {
        let q = 1.0 - p;
        let qn = (n as f64 * q.ln()).exp();
        let np = n as f64 * p;
        let bound = (n as f64).min(np + 10.0 * (np * q + 1.0).sqrt()) as i64;
        let mut x = 0;
        let mut px = qn;
        let mut u = self.next_double();
        while u > px {
            x += 1;
            if x > bound {
                x = 0;
                px = qn;
                u = self.next_double();
            } else {
                u -= px;
                px = ((n - x + 1) as f64 * p * px) / (x as f64 * q);
            }
        }
        x
    }

    #[allow(clippy::many_single_char_names)]
    fn binomial_btpe(&mut self, n: i64, p: f64) -> i64 {
        let nf = n as f64;
        let r = p.min(1.0 - p);
        let q = 1.0 - r;
        let fm = nf * r + r;
        let m = fm.floor() as i64;
        let mf = m as f64;
        let p1 = (2.195 * (nf * r * q).sqrt() - 4.6 * q).floor() + 0.5;
        let xm = mf + 0.5;
        let xl = xm - p1;
        let xr = xm + p1;
        let c = 0.134 + 20.5 / (15.3 + mf);
        let a = (fm - xl) / (fm - xl * r);
        let laml = a * (1.0 + a / 2.0);
        let a = (xr - fm) / (xr * q);
        let lamr = a * (1.0 + a / 2.0);
        let p2 = p1 * (1.0 + 2.0 * c);
        let p3 = p2 + c / laml;
        let p4 = p3 + c / lamr;
        let nrq = nf * r * q;
        let y = 'outer: loop {
            let u = self.next_double() * p4;
            let mut v = self.next_double();
            let y: i64;
            if u <= p1 {
                break (xm - p1 * v + u).floor() as i64; // Step 60
            } else if u <= p2 {
                let x = xl + (u - p1) / c;
                v = v * c + 1.0 - (mf - x + 0.5).abs() / p1;
                if v > 1.0 {
                    continue;
                }
                y = x.floor() as i64;
            } else if u <= p3 {
                let yy = (xl + v.ln() / laml).floor();
                if yy < 0.0 || v == 0.0 {
                    continue;
                }
                y = yy as i64;
                v *= (u - p2) * laml;
            } else {
                let yy = (xr - v.ln() / lamr).floor();
                if yy > nf || v == 0.0 {
                    continue;
                }
                y = yy as i64;
                v *= (u - p3) * lamr;
            }
            // Step 50
            let k = (y - m).abs();
            let kf = k as f64;
            if !(k > 20 && kf < nrq / 2.0 - 1.0) {
                let s = r / q;
                let a = s * (nf + 1.0);
                let mut f = 1.0;
                if m < y {
                    for i in m + 1..=y {
                        f *= a / i as f64 - s;
                    }
                } else if m > y {
                    for i in y + 1..=m {
                        f /= a / i as f64 - s;
                    }
                }
                if v > f {
                    continue;
                }
                break y;
            }
            // Step 52
            let rho =
                (kf / nrq) * ((kf * (kf / 3.0 + 0.625) + 0.166_666_666_666_666_66) / nrq + 0.5);
            let t = -kf * kf / (2.0 * nrq);
            let big_a = v.ln();
            if big_a < t - rho {
                break y;
            }
            if big_a > t + rho {
                continue;
            }
            let x1 = (y + 1) as f64;
            let f1 = mf + 1.0;
            let z = nf + 1.0 - mf;
            let w = nf - y as f64 + 1.0;
            let (x2, f2, z2, w2) = (x1 * x1, f1 * f1, z * z, w * w);
            let corr = |s2: f64, s: f64| {
                (13680. - (462. - (132. - (99. - 140. / s2) / s2) / s2) / s2) / s / 166320.
            };
            let bound = xm * (f1 / x1).ln()
                + (nf - mf + 0.5) * (z / w).ln()
                + (y - m) as f64 * (w * r / (x1 * q)).ln()
                + corr(f2, f1)
                + corr(z2, z)
                + corr(x2, x1)
                + corr(w2, w);
            if big_a > bound {
                continue 'outer;
            }
            break y;
        };
        if p > 0.5 {
            n - y
        } else {
            y
        }
    }

    pub fn binomial(&mut self, n: i64, p: f64) -> i64 {
        if n == 0 || p == 0.0 {
            return 0;
        }
        if p <= 0.5 {
            if p * n as f64 <= 30.0 {
                self.binomial_inversion(n, p)
            } else {
                self.binomial_btpe(n, p)
            }
        } else {
            let q = 1.0 - p;
            if q * n as f64 <= 30.0 {
                n - self.binomial_inversion(n, q)
            } else {
                n - self.binomial_btpe(n, q)
            }
        }
    }

    pub fn multinomial(&mut self, n: i64, pvals: &[f64]) -> Vec<i64> {
        let d = pvals.len();
        let mut out = vec![0i64; d];
        let mut remaining_p = 1.0;
        let mut dn = n;
        for j in 0..d - 1 {
            out[j] = self.binomial(dn, pvals[j] / remaining_p);
            dn -= out[j];
            if dn <= 0 {
                break;
            }
            remaining_p -= pvals[j];
        }
        if dn > 0 {
            out[d - 1] = dn;
        }
        out
    }

    /// A uniform integer in [0, max] by masked rejection.
    fn interval(&mut self, max: u32) -> u32 {
        if max == 0 {
            return 0;
        }
        let mut mask = max;
        for s in [1, 2, 4, 8, 16] {
            mask |= mask >> s;
        }
        loop {
            let v = self.next_u32() & mask;
            if v <= max {
                return v;
            }
        }
    }

    /// `shuffle` of a 1-d array (Fisher–Yates from the end).
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.interval(i as u32) as usize;
            items.swap(i, j);
        }
    }
}

/// Values printed by numpy itself (scripts/dev/numpy_reference.py).
#[cfg(test)]
#[allow(dead_code)]
#[allow(clippy::excessive_precision)]
pub(super) mod reference {
    include!("numpy_reference.in");
}

#[cfg(test)]
mod tests {
    use super::reference::*;
    use super::*;

    // The reference values come from numpy itself: scripts/dev/numpy_reference.py makes the
    // same calls in the same order and prints numpy_reference.in.
    #[test]
    fn matches_numpy_streams() {
        let mut r = NumpyRandomState::new(12345);
        let ln: Vec<f64> = (0..3).map(|_| r.lognormal(4.0, 2.0)).collect();
        let expect_ln = [NP_LN0, NP_LN1, NP_LN2];
        for (a, b) in ln.iter().zip(expect_ln) {
            assert!(
                (a - b).abs() <= 1e-9 * b.abs(),
                "lognormal {a} vs numpy {b}"
            );
        }
        let d = r.dirichlet(&[0.4, 0.4, 0.4]);
        for (a, b) in d.iter().zip(NP_DIR) {
            assert!((a - b).abs() < 1e-12, "dirichlet {a} vs numpy {b}");
        }
        assert_eq!(r.multinomial(1000, &[0.2, 0.5, 0.3]), NP_MULTI.to_vec());
        assert_eq!(
            r.multinomial(40, &[0.05, 0.9, 0.05]),
            NP_MULTI_SMALL.to_vec()
        );
        let mut idx: Vec<i64> = (0..10).collect();
        r.shuffle(&mut idx);
        assert_eq!(idx, NP_SHUFFLE.to_vec());
        let u = r.uniform(-1.0, 1.0);
        assert!(
            (u - NP_UNIFORM).abs() < 1e-15,
            "uniform {u} vs numpy {NP_UNIFORM}"
        );
        let g = r.normal(0.0, 0.1);
        assert!(
            (g - NP_NORMAL).abs() < 1e-15,
            "normal {g} vs numpy {NP_NORMAL}"
        );
    }

    /// A block fill draws exactly what one draw at a time does, across block boundaries at
    /// even and odd positions, and leaves the stream at the same place.
    #[test]
    fn fill_uniform_draws_as_uniform_does() {
        for (skip, len) in [(0, 5000), (1, 623), (623, 2), (311, 1250), (2, 0)] {
            let mut one = NumpyRandomState::new(7);
            let mut block = NumpyRandomState::new(7);
            for _ in 0..skip {
                one.next_u32();
                block.next_u32();
            }
            let want: Vec<f64> = (0..len).map(|_| one.uniform(-1.0, 1.0)).collect();
            let mut got = vec![0.0; len];
            block.fill_uniform(&mut got, -1.0, 1.0);
            assert!(
                want.iter()
                    .zip(&got)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "skip {skip}, {len} draws"
            );
            assert_eq!(
                one.next_u32(),
                block.next_u32(),
                "skip {skip}: stream moved on alike"
            );
        }
    }

    #[test]
    fn skip_uniform_leaves_the_stream_where_drawing_does() {
        for (before, len) in [
            (0, 5000),
            (1, 623),
            (623, 1),
            (624, 312),
            (311, 1250),
            (5, 0),
        ] {
            let mut drawn = NumpyRandomState::new(9);
            let mut skipped = NumpyRandomState::new(9);
            for _ in 0..before {
                drawn.next_u32();
                skipped.next_u32();
            }
            for _ in 0..len {
                drawn.uniform(-1.0, 1.0);
            }
            skipped.skip_uniform(len);
            let next = |r: &mut NumpyRandomState| [r.next_u32(), r.next_u32(), r.next_u32()];
            assert_eq!(
                next(&mut drawn),
                next(&mut skipped),
                "{before} words, then {len} draws"
            );
            assert_eq!(drawn.normal(0.0, 1.0), skipped.normal(0.0, 1.0));
        }
    }
}
