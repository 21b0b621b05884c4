//! The GPUs of one host shared among the points a study runs at once: each running point holds
//! its own, and no GPU is held by two points, so that two engines never measure each other.

use crate::StudyError;

/// The environment variables a point's server gets its GPUs in: CUDA's, and HIP's for ROCm (HIP
/// also reads CUDA's, and vLLM on ROCm requires the two to agree). `ROCR_VISIBLE_DEVICES` is
/// left alone on purpose: ROCm applies it first and numbers HIP's devices within it, so the
/// same list in both would hide every GPU past the first few.
pub const GPU_VARIABLES: [&str; 2] = ["CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"];

/// The GPUs a study hands out, `per_point` at a time. Handing out takes the first free ones in
/// the order given; giving back makes them free again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuPool {
    /// Every GPU, in the order given, and whether a point holds it.
    gpus: Vec<(String, bool)>,
    per_point: usize,
}

impl GpuPool {
    /// A pool of `gpus` (indices or UUIDs as the engine's runtime reads them), `per_point` to
    /// each point. Refuses an empty list, an empty or repeated id, an id with a space or a comma,
    /// and a `per_point` of 0 or more than the list holds.
    pub fn new(gpus: &[String], per_point: usize) -> Result<GpuPool, StudyError> {
        let invalid = |m: String| Err(StudyError::Invalid(m));
        if gpus.is_empty() {
            return invalid("--gpus lists no GPU".into());
        }
        for (i, id) in gpus.iter().enumerate() {
            if id.is_empty() || id.chars().any(|c| c == ',' || c.is_whitespace()) {
                return invalid(format!(
                    "--gpus: `{id}` is no GPU id (an index such as 0, or a UUID)"
                ));
            }
            if gpus[..i].contains(id) {
                return invalid(format!(
                    "--gpus names GPU {id} twice: points would share it"
                ));
            }
        }
        if per_point == 0 || per_point > gpus.len() {
            return invalid(format!(
                "--gpus-per-point {per_point}: each point needs 1 to {} of the {} GPUs --gpus lists",
                gpus.len(),
                gpus.len()
            ));
        }
        Ok(GpuPool {
            gpus: gpus.iter().map(|g| (g.clone(), false)).collect(),
            per_point,
        })
    }

    /// How many points can hold their GPUs at once.
    pub fn capacity(&self) -> usize {
        self.gpus.len() / self.per_point
    }

    /// GPUs each point holds.
    pub fn per_point(&self) -> usize {
        self.per_point
    }

    /// The GPUs no point holds now.
    pub fn free(&self) -> usize {
        self.gpus.iter().filter(|(_, held)| !held).count()
    }

    /// `per_point` free GPUs, now held, in the order given; `None` (and nothing held) when
    /// fewer are free.
    pub fn take(&mut self) -> Option<Vec<String>> {
        if self.free() < self.per_point {
            return None;
        }
        let mut taken = Vec::with_capacity(self.per_point);
        for (id, held) in self.gpus.iter_mut().filter(|(_, held)| !*held) {
            if taken.len() == self.per_point {
                break;
            }
            *held = true;
            taken.push(id.clone());
        }
        Some(taken)
    }

    /// Frees `gpus`. An id the pool does not hold out is ignored.
    pub fn give_back(&mut self, gpus: &[String]) {
        for (id, held) in &mut self.gpus {
            if gpus.contains(id) {
                *held = false;
            }
        }
    }
}

/// The GPUs as the variables of [`GPU_VARIABLES`] take them: `0,1`.
pub(crate) fn visible_devices(gpus: &[String]) -> String {
    gpus.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ids(n: usize) -> Vec<String> {
        (0..n).map(|i| i.to_string()).collect()
    }

    #[test]
    fn points_get_the_first_free_gpus_and_bad_lists_are_refused() {
        let mut pool = GpuPool::new(&ids(4), 2).unwrap();
        assert_eq!(pool.capacity(), 2);
        let a = pool.take().unwrap();
        let b = pool.take().unwrap();
        assert_eq!((a.clone(), b), (ids(2), vec!["2".into(), "3".into()]));
        assert_eq!(pool.take(), None, "every GPU is held");
        pool.give_back(&a);
        assert_eq!(pool.take(), Some(a));
        let e = |gpus: &[&str], per: usize| {
            let gpus: Vec<String> = gpus.iter().map(|s| (*s).to_owned()).collect();
            GpuPool::new(&gpus, per).unwrap_err().to_string()
        };
        assert!(e(&[], 1).contains("no GPU"));
        assert!(e(&["0", "0"], 1).contains("twice"));
        assert!(e(&["0", ""], 1).contains("no GPU id"));
        assert!(e(&["0"], 2).contains("--gpus-per-point 2"));
        assert!(e(&["0"], 0).contains("--gpus-per-point 0"));
        assert_eq!(visible_devices(&ids(3)), "0,1,2");
    }

    #[derive(Debug, Clone)]
    enum Op {
        Take,
        /// Give back the lease at this position among those held (modulo their count).
        GiveBack(usize),
        /// Give back ids no lease holds, or held by another: ignored for ids not out.
        Stray(Vec<u8>),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => Just(Op::Take),
            2 => any::<usize>().prop_map(Op::GiveBack),
            1 => proptest::collection::vec(0u8..12, 0..4).prop_map(Op::Stray),
        ]
    }

    proptest! {
        /// Whatever the order of takes and returns: no GPU is in two held leases, a lease has
        /// exactly `per_point` GPUs of the list, and the pool's free count is what no lease holds.
        #[test]
        fn no_gpu_is_handed_out_twice_while_held(
            n in 1usize..9,
            per in 1usize..4,
            ops in proptest::collection::vec(op(), 0..60),
        ) {
            let gpus = ids(n);
            let Ok(mut pool) = GpuPool::new(&gpus, per) else {
                prop_assert!(per > n);
                return Ok(());
            };
            let mut leases: Vec<Vec<String>> = Vec::new();
            for op in ops {
                match op {
                    Op::Take => {
                        let held: usize = leases.iter().map(Vec::len).sum();
                        match pool.take() {
                            Some(lease) => {
                                prop_assert_eq!(lease.len(), per);
                                for g in &lease {
                                    prop_assert!(gpus.contains(g));
                                    prop_assert!(!leases.iter().flatten().any(|h| h == g), "{} handed out twice", g);
                                }
                                leases.push(lease);
                            }
                            None => prop_assert!(n - held < per, "refused with {} free", n - held),
                        }
                    }
                    Op::GiveBack(i) if !leases.is_empty() => {
                        let lease = leases.remove(i % leases.len());
                        pool.give_back(&lease);
                    }
                    Op::GiveBack(_) => {}
                    Op::Stray(stray) => {
                        // Only ids no lease holds: a stray return of a held GPU is the caller's
                        // bug, which the scheduler never makes (it returns what it took).
                        let stray: Vec<String> = stray
                            .iter()
                            .map(|i| i.to_string())
                            .filter(|s| !leases.iter().flatten().any(|h| h == s))
                            .collect();
                        pool.give_back(&stray);
                    }
                }
                let held: usize = leases.iter().map(Vec::len).sum();
                prop_assert_eq!(pool.free(), n - held);
            }
        }
    }
}
