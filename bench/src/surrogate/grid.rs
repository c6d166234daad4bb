//! The transport half of `fabkit surrogate`'s model, as in POET's setup: a
//! 2-D grid of cells, each holding the nine species of [`chem`], carried by
//! a constant flow to the right and down with the explicit upwind scheme.
//! Water of [`chem::INFLOW`] enters through the top quarter of the left
//! boundary; elsewhere the boundaries let nothing in. The error a cache
//! introduces is measured here too, grid against grid. Pure.

use super::chem::{self, State, MOBILE};

/// Courant numbers of the flow along x and y (their sum at most 1 keeps
/// the upwind scheme stable).
const CX: f64 = 0.5;
const CY: f64 = 0.25;

/// The cells, row by row (`ny` rows of `nx`).
#[derive(Clone, Debug, PartialEq)]
pub struct Grid {
    /// Cells per row.
    pub nx: usize,
    /// Rows.
    pub ny: usize,
    /// `nx * ny` states.
    pub cells: Vec<State>,
}

impl Grid {
    /// Every cell at [`chem::INITIAL`]; `nx * ny` is checked by the caller.
    pub fn new(nx: usize, ny: usize) -> Grid {
        Grid {
            nx,
            ny,
            cells: vec![chem::INITIAL; nx * ny],
        }
    }

    /// One time step of the flow: each mobile species of each cell takes
    /// in from its left and upper neighbours what it gives to the right
    /// and below.
    pub fn advect(&mut self) {
        let (nx, ny) = (self.nx, self.ny);
        let inflow_rows = ny.div_ceil(4);
        let old = self.cells.clone();
        for y in 0..ny {
            for x in 0..nx {
                let here = &old[y * nx + x];
                let left = if x > 0 {
                    &old[y * nx + x - 1]
                } else if y < inflow_rows {
                    &chem::INFLOW
                } else {
                    here
                };
                let up = if y > 0 { &old[(y - 1) * nx + x] } else { here };
                let cell = &mut self.cells[y * nx + x];
                for s in 0..MOBILE {
                    cell[s] = here[s] - CX * (here[s] - left[s]) - CY * (here[s] - up[s]);
                }
            }
        }
    }
}

/// The cells rank `rank` of `ranks` reacts, in order: the grid's rows
/// dealt out in turn, so that every rank gets rows near the inflow, where
/// the front makes inputs new, and rows ahead of it, where they repeat
/// (blocks of rows would leave the ranks far from the inflow waiting for
/// the others).
pub fn share(g: &Grid, rank: usize, ranks: usize) -> Vec<usize> {
    (rank..g.ny)
        .step_by(ranks.max(1))
        .flat_map(|y| y * g.nx..(y + 1) * g.nx)
        .collect()
}

/// How far a grid is from the reference, per species: the largest and the
/// mean of |got - want| / max(|want|, floor x the species' largest |want|)
/// over the cells. The floor keeps a cell where the reference is zero, or
/// nearly (ahead of the front), from dividing by nothing: there the
/// difference counts against the species' own scale. A species that is
/// zero everywhere counts differences against the smallest positive
/// double. NaN anywhere makes the species' figures NaN.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Error {
    /// Per species, in [`chem::SPECIES`] order.
    pub max: Vec<f64>,
    /// See `max`.
    pub mean: Vec<f64>,
}

/// The error of `got` against `want` (grids of the same size), with
/// `floor` a fraction of each species' largest |want|.
pub fn error(got: &Grid, want: &Grid, floor: f64) -> Error {
    let species = chem::SPECIES.len();
    let n = want.cells.len().max(1) as f64;
    let mut scale = vec![0.0f64; species];
    for w in &want.cells {
        for s in 0..species {
            scale[s] = scale[s].max(w[s].abs());
        }
    }
    let floors: Vec<f64> = scale
        .iter()
        .map(|m| (m * floor).max(f64::MIN_POSITIVE))
        .collect();
    let mut e = Error {
        max: vec![0.0; species],
        mean: vec![0.0; species],
    };
    for (g, w) in got.cells.iter().zip(&want.cells) {
        for s in 0..species {
            let r = (g[s] - w[s]).abs() / w[s].abs().max(floors[s]);
            // f64::max would drop a NaN: it is kept, and shows.
            e.max[s] = if r.is_nan() || e.max[s].is_nan() {
                f64::NAN
            } else {
                e.max[s].max(r)
            };
            e.mean[s] += r / n;
        }
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_inflow_enters_the_top_left_and_moves_right_and_down() {
        let mut g = Grid::new(8, 8);
        g.advect();
        let mg = |g: &Grid, x: usize, y: usize| g.cells[y * g.nx + x][6];
        assert!(mg(&g, 0, 0) > 0.0 && mg(&g, 0, 1) > 0.0);
        assert_eq!(mg(&g, 1, 0), 0.0);
        assert_eq!(mg(&g, 0, 7), 0.0);
        for _ in 0..20 {
            g.advect();
        }
        assert!(mg(&g, 4, 0) > 0.0 && mg(&g, 4, 3) > 0.0);
        // Minerals stay where they are.
        assert!(g.cells.iter().all(|c| c[7] == chem::INITIAL[7]));
    }

    #[test]
    fn shares_cover_every_cell_once() {
        for ((nx, ny), ranks) in [((10, 3), 3), ((1, 1), 4), ((8, 8), 4), ((7, 2), 1)] {
            let g = Grid::new(nx, ny);
            let mut all: Vec<usize> = (0..ranks).flat_map(|r| share(&g, r, ranks)).collect();
            all.sort_unstable();
            assert_eq!(all, (0..nx * ny).collect::<Vec<_>>());
        }
        // Rows in turn: rank 1 of 2 has the second and fourth rows.
        assert_eq!(share(&Grid::new(2, 4), 1, 2), [2, 3, 6, 7]);
    }

    #[test]
    fn the_error_is_relative_with_a_floor_where_a_species_is_zero() {
        let mut want = Grid::new(3, 1);
        want.cells[2][6] = 1e-3; // Mg: its scale
        let mut got = want.clone();
        got.cells[0][3] *= 1.01; // C, nonzero: 1 %
        got.cells[1][6] = 1e-11; // Mg, zero here: against 1e-6 x 1e-3
        let e = error(&got, &want, 1e-6);
        assert!((e.max[3] - 0.01).abs() < 1e-12);
        assert!((e.mean[3] - 0.01 / 3.0).abs() < 1e-12);
        assert!((e.max[6] - 0.01).abs() < 1e-9, "{}", e.max[6]);
        assert_eq!(e.max[0], 0.0);
        // Charge is zero everywhere: no division by zero, no NaN.
        assert_eq!(e.max[2], 0.0);
        got.cells[0][0] = f64::NAN;
        assert!(error(&got, &want, 1e-6).max[0].is_nan());
    }
}
