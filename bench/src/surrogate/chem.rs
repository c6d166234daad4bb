//! The per-cell chemistry `fabkit surrogate` caches: a stand-in for the
//! PHREEQC call of POET's dolomite benchmark, with its shape (nine species,
//! two minerals, a reaction front behind a magnesium chloride inflow) and
//! its cost (an iterative solver per cell and time step), not its
//! thermodynamics. Calcite dissolves and dolomite precipitates by kinetic
//! rate laws in their saturation ratios, integrated by implicit Euler
//! sub-steps, each solved by Newton's method; more sub-steps cost more and
//! change the result slightly, so cached and uncached runs are compared at
//! the same number.
//!
//! Also here: the cache's key (the inputs rounded to significant digits,
//! 80 B) and value (the exact result, 104 B), as POET lays them out. Pure:
//! no I/O, the same bits from the same inputs on every run.

/// Species of a cell, in this order: total H and O, charge, total C, Ca,
/// Cl, Mg (mol/kg water, carried by the flow), then the minerals calcite
/// and dolomite (mol/kg water, staying in their cell).
pub const SPECIES: [&str; 9] = [
    "H", "O", "Charge", "C", "Ca", "Cl", "Mg", "Calcite", "Dolomite",
];

/// Species the flow carries (the first seven).
pub const MOBILE: usize = 7;

/// A cell's state.
pub type State = [f64; 9];

/// Bytes of a state sent between ranks.
pub const STATE_BYTES: usize = std::mem::size_of::<State>();

const C: usize = 3;
const CA: usize = 4;
const MG: usize = 6;
const CALCITE: usize = 7;
const DOLOMITE: usize = 8;

/// The water the grid starts with, at equilibrium with calcite.
pub const INITIAL: State = [
    111.0124, 55.5087, 0.0, 1.2279e-4, 1.2279e-4, 0.0, 0.0, 2.07e-4, 0.0,
];

/// The water flowing in: magnesium chloride, no calcium or carbon.
pub const INFLOW: State = [111.0124, 55.5087, 0.0, 0.0, 0.0, 2.0e-3, 1.0e-3, 0.0, 0.0];

/// Solubility products of calcite (Ca x C) and dolomite (Ca x Mg x C^2).
const KSP_CALCITE: f64 = 1.5e-8;
const KSP_DOLOMITE: f64 = 1.0e-16;
/// Rate constants, mol/(kg s).
const K_CALCITE: f64 = 1.0e-6;
const K_DOLOMITE: f64 = 1.0e-7;
/// Newton's iterations per sub-step at most, and when a step is small
/// enough to stop (relative to what the cell holds).
const MAX_NEWTON: u32 = 30;
const NEWTON_TOL: f64 = 1e-13;

/// What one call of the solver returns: the cell's new state and what a
/// geochemical code reports beside it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Solved {
    /// The new state.
    pub state: State,
    /// Saturation ratios of calcite and dolomite at the end.
    pub saturation: [f64; 2],
    /// Newton iterations over all sub-steps.
    pub iterations: u32,
}

/// Reacts `s` for `dt` seconds in `substeps` implicit Euler steps.
pub fn solve(s: &State, dt: f64, substeps: u32) -> Solved {
    let mut s = *s;
    let h = dt / f64::from(substeps.max(1));
    let mut iterations = 0;
    for _ in 0..substeps.max(1) {
        let (a, b, it) = step(&s, h);
        iterations += it;
        apply(&mut s, a, b);
    }
    Solved {
        saturation: saturation(&s),
        state: s,
        iterations,
    }
}

/// Ratios of ion activity product to solubility product.
fn saturation(s: &State) -> [f64; 2] {
    [
        s[CA] * s[C] / KSP_CALCITE,
        s[CA] * s[MG] * s[C] * s[C] / KSP_DOLOMITE,
    ]
}

/// Calcite dissolved (`a`) and dolomite precipitated (`b`) over one step
/// of `h` seconds: the root of the implicit Euler equations by Newton's
/// method, kept within what the cell holds; and the iterations it took.
fn step(s: &State, h: f64) -> (f64, f64, u32) {
    let (ca0, mg0, c0) = (s[CA], s[MG], s[C]);
    let (kc, kd) = (h * K_CALCITE / KSP_CALCITE, h * K_DOLOMITE / KSP_DOLOMITE);
    // A mineral absent and undersaturated neither dissolves nor forms.
    let [omega_c, omega_d] = saturation(s);
    let calcite_on = s[CALCITE] > 0.0 || omega_c > 1.0;
    let dolomite_on = s[DOLOMITE] > 0.0 || omega_d > 1.0;
    let scale = ca0 + mg0 + c0 + s[CALCITE] + s[DOLOMITE];
    let tol = NEWTON_TOL * scale;
    let (mut a, mut b) = (0.0f64, 0.0f64);
    let mut it = 0;
    while it < MAX_NEWTON {
        it += 1;
        let ca = ca0 + a - b;
        let mg = mg0 - b;
        let c = c0 + a - 2.0 * b;
        let p = ca * mg * c * c;
        let (f1, j11, j12) = if calcite_on {
            (
                a - h * K_CALCITE + kc * ca * c,
                1.0 + kc * (c + ca),
                -kc * (c + 2.0 * ca),
            )
        } else {
            (a, 1.0, 0.0)
        };
        let (f2, j21, j22) = if dolomite_on {
            let dp_da = mg * c * c + 2.0 * ca * mg * c;
            let dp_db = -(mg * c * c) - ca * c * c - 4.0 * ca * mg * c;
            (b + h * K_DOLOMITE - kd * p, -kd * dp_da, 1.0 - kd * dp_db)
        } else {
            (b, 0.0, 1.0)
        };
        let det = j11 * j22 - j12 * j21;
        if det == 0.0 || !det.is_finite() {
            break;
        }
        let da = (f1 * j22 - f2 * j12) / det;
        let db = (j11 * f2 - j21 * f1) / det;
        a -= da;
        b -= db;
        if da.abs() <= tol && db.abs() <= tol {
            break;
        }
    }
    // What the cell holds bounds the step: minerals and ions stay >= 0.
    let a = a.min(s[CALCITE]).max(-ca0.min(c0));
    let b = b
        .max(-s[DOLOMITE])
        .min(mg0)
        .min(ca0 + a)
        .min((c0 + a) / 2.0);
    (a, b, it)
}

/// Moves `a` of calcite and `b` of dolomite into (or out of) the water.
fn apply(s: &mut State, a: f64, b: f64) {
    s[CALCITE] -= a;
    s[DOLOMITE] += b;
    s[CA] += a - b;
    s[MG] -= b;
    s[C] += a - 2.0 * b;
    // CaCO3 carries 3 O, CaMg(CO3)2 six.
    s[1] += 3.0 * a - 6.0 * b;
    // Round-off below zero is zero.
    for v in s.iter_mut() {
        *v = v.max(0.0);
    }
}

/// Bytes of a key: nine species and the time step, 8 B each (POET's 80 B).
pub const KEY_LEN: usize = 80;
/// Bytes of a value: 13 doubles (POET's 104 B).
pub const VALUE_LEN: usize = 104;

/// How inputs are rounded into keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Digits {
    /// To this many significant decimal digits (1 to [`MAX_DIGITS`]).
    Sig(u32),
    /// Not at all: the key is the inputs' bits, so a hit is the result of
    /// the very same inputs.
    Exact,
}

/// The most significant digits a key keeps (a rounded mantissa below
/// 10^15 fits the key's 51 bits).
pub const MAX_DIGITS: u32 = 15;

impl std::fmt::Display for Digits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Digits::Sig(d) => write!(f, "{d}"),
            Digits::Exact => f.write_str("exact"),
        }
    }
}

/// `x` to `d` significant digits, as one word: the decimal exponent in the
/// top 11 bits and the rounded mantissa (zigzag) below, so equal words
/// mean equal rounded values and no float formatting is involved. Zero,
/// and anything that rounds to it, is 0.
pub fn round_word(x: f64, d: Digits) -> u64 {
    let d = match d {
        Digits::Exact => return x.to_bits(),
        Digits::Sig(d) => d.clamp(1, MAX_DIGITS),
    };
    if x == 0.0 || !x.is_finite() {
        return if x.is_finite() { 0 } else { x.to_bits() };
    }
    // The exponent of x's leading digit: from the binary exponent (no
    // log10 per input: keys are made for every cell and step), corrected
    // against the powers of ten.
    let ax = x.abs();
    let e2 = ((x.to_bits() >> 52) & 0x7ff) as i32 - 1023;
    let mut e = (f64::from(e2) * std::f64::consts::LOG10_2).floor() as i32;
    while e < POW10_MAX && pow10(e + 1) <= ax {
        e += 1;
    }
    while e > -POW10_MAX && pow10(e) > ax {
        e -= 1;
    }
    let mut m = scaled(x, d as i32 - 1 - e);
    // 9.99 to 2 digits is 10.0: one more digit; carry it into the exponent.
    if m.abs() >= pow10(d as i32) {
        e += 1;
        m = scaled(x, d as i32 - 1 - e);
    }
    let m = m as i64;
    let zigzag = ((m << 1) ^ (m >> 63)) as u64;
    (((e + 1024) as u64 & 0x7ff) << 52) | (zigzag & ((1 << 52) - 1))
}

/// `x` x 10^`shift`, rounded to a whole number; in two factors where one
/// would overflow (a subnormal `x` needs 10^320).
fn scaled(x: f64, shift: i32) -> f64 {
    if shift.abs() > 300 {
        (x * pow10(shift / 2) * pow10(shift - shift / 2)).round()
    } else {
        (x * pow10(shift)).round()
    }
}

/// The largest |n| of [`pow10`]'s table.
const POW10_MAX: i32 = 340;

/// 10^n for |n| up to [`POW10_MAX`] (beyond: the nearest in the table), from
/// a table made once: the same values powi gives, without its loop per call.
fn pow10(n: i32) -> f64 {
    static TABLE: std::sync::OnceLock<Vec<f64>> = std::sync::OnceLock::new();
    let t = TABLE.get_or_init(|| {
        (-POW10_MAX..=POW10_MAX)
            .map(|k| {
                if k >= 0 {
                    10f64.powi(k)
                } else {
                    1.0 / 10f64.powi(-k)
                }
            })
            .collect()
    });
    t[(n.clamp(-POW10_MAX, POW10_MAX) + POW10_MAX) as usize]
}

/// The key of a cell's inputs: each species and the time step rounded.
pub fn key(s: &State, dt: f64, d: Digits, out: &mut [u8; KEY_LEN]) {
    for (i, x) in s.iter().chain(std::iter::once(&dt)).enumerate() {
        out[i * 8..(i + 1) * 8].copy_from_slice(&round_word(*x, d).to_le_bytes());
    }
}

/// The cached value, 13 doubles as POET's: the exact new state (9), the two
/// saturation ratios and the iterations the solver reports beside it, and
/// the time step it ran with: of the input, what the key does not round
/// (the species are in the key, rounded; storing them exactly too would
/// take 9 more doubles than POET's value has).
pub fn value(r: &Solved, dt: f64, out: &mut [u8]) {
    let words = r
        .state
        .iter()
        .chain(&r.saturation)
        .copied()
        .chain([f64::from(r.iterations), dt]);
    for (i, x) in words.enumerate() {
        out[i * 8..(i + 1) * 8].copy_from_slice(&x.to_le_bytes());
    }
}

/// The new state a cached value holds.
pub fn state_of(value: &[u8]) -> State {
    let mut s = [0.0; 9];
    for (i, x) in s.iter_mut().enumerate() {
        let w: [u8; 8] = value[i * 8..(i + 1) * 8]
            .try_into()
            .expect("a slice of 8 bytes");
        *x = f64::from_le_bytes(w);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_keeps_the_digits_asked_for_and_carries_into_the_exponent() {
        let d = Digits::Sig;
        assert_eq!(round_word(1.23456, d(3)), round_word(1.2349, d(3)));
        assert_ne!(round_word(1.23456, d(3)), round_word(1.2351, d(3)));
        assert_eq!(round_word(9.996, d(3)), round_word(10.0, d(3)));
        assert_eq!(round_word(0.0999, d(2)), round_word(0.1, d(2)));
        assert_ne!(round_word(-1.5e-4, d(2)), round_word(1.5e-4, d(2)));
        assert_eq!(round_word(0.0, d(5)), 0);
        assert_eq!(round_word(-0.0, d(5)), 0);
        assert_ne!(round_word(1e-300, d(5)), 0);
        assert_eq!(round_word(1e-300, d(5)), round_word(1.000001e-300, d(5)));
        // Subnormals and the largest doubles round too.
        let tiny = f64::from_bits(12345);
        assert_eq!(round_word(tiny, d(2)), round_word(tiny * 1.001, d(2)));
        assert_ne!(round_word(tiny, d(2)), 0);
        assert_eq!(
            round_word(f64::MAX, d(3)),
            round_word(f64::MAX * 0.9999, d(3))
        );
        // Exact keys tell neighbouring doubles apart; 15 digits need not.
        let (x, y) = (0.1, f64::from_bits(0.1f64.to_bits() + 1));
        assert_ne!(round_word(x, Digits::Exact), round_word(y, Digits::Exact));
        assert_eq!(round_word(x, d(15)), round_word(y, d(15)));
        assert_ne!(round_word(1.00000000000001, d(15)), round_word(1.0, d(15)));
    }

    #[test]
    fn a_rounded_word_keeps_exactly_the_digits_asked_for() {
        // Every mantissa has d digits whatever the magnitude: the exponent
        // found from the binary one is the leading digit's, also at the
        // powers of ten and their neighbours.
        let mut x = 1.0e-300f64;
        let mut seen = 0;
        while x < 1e300 {
            for y in [x, x.next_up(), x.next_down(), -x, x * 3.7, x * 9.9999] {
                for d in [1, 2, 5, 15] {
                    let w = round_word(y, Digits::Sig(d));
                    let z = (w & ((1 << 52) - 1)) as i64;
                    let m = (z >> 1) ^ -(z & 1);
                    let digits = m.unsigned_abs().to_string().len() as u32;
                    assert_eq!(digits, d, "{y:e} to {d} digits: mantissa {m}");
                    seen += 1;
                }
            }
            x *= 10.0;
        }
        assert!(seen > 10_000);
    }

    #[test]
    fn the_solver_is_deterministic_and_reacts_behind_the_front() {
        let dt = 100.0;
        let a = solve(&INITIAL, dt, 50);
        assert_eq!(a, solve(&INITIAL, dt, 50));
        // Near equilibrium ahead of the front: almost nothing changes.
        assert!((a.state[CA] - INITIAL[CA]).abs() < 1e-6);
        // Magnesium arriving: dolomite forms and calcite dissolves.
        let mut s = INITIAL;
        s[MG] = 1e-3;
        s[5] = 2e-3;
        let r = solve(&s, dt, 50);
        assert!(r.state[DOLOMITE] > 0.0, "{r:?}");
        assert!(r.state[CALCITE] < INITIAL[CALCITE], "{r:?}");
        for (i, x) in r.state.iter().enumerate() {
            assert!(x.is_finite() && *x >= 0.0, "{}: {x}", SPECIES[i]);
        }
        // Mass balance: Ca and Mg in water and minerals are conserved.
        let ca = |s: &State| s[CA] + s[CALCITE] + s[DOLOMITE];
        let mg = |s: &State| s[MG] + s[DOLOMITE];
        assert!((ca(&r.state) - ca(&s)).abs() < 1e-15);
        assert!((mg(&r.state) - mg(&s)).abs() < 1e-15);
    }

    #[test]
    fn a_value_carries_the_state_back_bit_for_bit() {
        let r = solve(&INITIAL, 100.0, 10);
        let mut v = [0u8; VALUE_LEN];
        value(&r, 100.0, &mut v);
        assert_eq!(state_of(&v), r.state);
        let mut k = [0u8; KEY_LEN];
        key(&INITIAL, 100.0, Digits::Exact, &mut k);
        assert_eq!(k[..8], INITIAL[0].to_bits().to_le_bytes());
    }
}
