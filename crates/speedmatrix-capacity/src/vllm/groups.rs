//! How vLLM groups layer specs into KV-cache groups (`get_kv_cache_groups`,
//! `unify_kv_cache_spec_page_size`) and splits layers over pipeline stages
//! (`get_pp_indices`, each stage's share of the groups).

use super::layout::Spec;
use super::*;

/// The grouping `get_kv_cache_groups` arrives at.
pub(super) struct Planned {
    pub(super) groups: Vec<KvGroup>,
    /// Decoder layers of each group (same order as `groups`).
    pub(super) members: Vec<Vec<usize>>,
    pub(super) page_bytes: u64,
    pub(super) bytes_per_block: u64,
    pub(super) padding_layers: u64,
    /// One group whose block holds every layer's page (`UniformTypeKVCacheSpecs`).
    pub(super) summed_pages: bool,
}

/// `get_kv_cache_groups` for the cases this crate models.
pub(super) fn group_layers(specs: &[Spec], version: VllmVersion) -> Result<Planned, CapacityError> {
    let first = specs[0];
    let n = specs.len() as u64;
    let all: Vec<usize> = specs.iter().map(|s| s.layer).collect();
    let same =
        |a: &Spec, b: &Spec| a.kind == b.kind && a.page == b.page && a.block_size == b.block_size;
    if specs.iter().all(|s| same(s, &first)) {
        let g = KvGroup {
            kind: first.kind,
            layers: n,
            block_size: first.block_size,
        };
        return Ok(Planned {
            groups: vec![g],
            members: vec![all],
            page_bytes: first.page,
            bytes_per_block: first.page * n,
            padding_layers: 0,
            summed_pages: false,
        });
    }
    let same_type = specs
        .iter()
        .all(|s| s.kind == first.kind && s.block_size == first.block_size);
    if same_type {
        let sum: u64 = specs.iter().map(|s| s.page).sum();
        let g = KvGroup {
            kind: first.kind,
            layers: n,
            block_size: first.block_size,
        };
        return Ok(Planned {
            groups: vec![g],
            members: vec![all],
            page_bytes: specs.iter().map(|s| s.page).max().unwrap_or(0),
            bytes_per_block: sum,
            padding_layers: 0,
            summed_pages: true,
        });
    }
    // Hybrid: unify page sizes (attention pages that divide the largest page get a
    // proportionally larger block size; recurrent pages were padded already).
    let max_page = specs.iter().map(|s| s.page).max().unwrap_or(0);
    if max_page == 0 {
        return Err(CapacityError::Unplannable(
            "a layer has a zero-byte page".into(),
        ));
    }
    let mut buckets: Vec<(GroupKind, u64, Vec<usize>)> = Vec::new();
    for s in specs {
        let block_size = if s.page == max_page {
            s.block_size
        } else if s.kind != GroupKind::Mamba
            && max_page % s.page == 0
            && version.has(PAGE_UNIFICATION)
        {
            s.block_size * (max_page / s.page)
        } else {
            return Err(CapacityError::Unplannable(format!(
                "attention layers with pages of {} and {max_page} bytes per block cannot share one \
                 pool ({}); vLLM refuses to start",
                s.page,
                if version.has(PAGE_UNIFICATION) {
                    "the smaller does not divide the larger"
                } else {
                    "this vLLM release cannot unify unequal pages (v0.12.0 can)"
                }
            )));
        };
        match buckets
            .iter_mut()
            .find(|(k, b, _)| *k == s.kind && *b == block_size)
        {
            Some((_, _, layers)) => layers.push(s.layer),
            None => buckets.push((s.kind, block_size, vec![s.layer])),
        }
    }
    let min_n = buckets.iter().map(|b| b.2.len() as u64).min().unwrap_or(1);
    let max_n = buckets.iter().map(|b| b.2.len() as u64).max().unwrap_or(1);
    // One group size for all: the largest bucket when it is close to the
    // smallest (1.5× since v0.18, 1.25× in v0.12-v0.17), else the smallest.
    let close = if version.has(GROUP_RATIO_1_5) {
        2 * max_n < 3 * min_n
    } else if version.has(PAGE_UNIFICATION) {
        4 * max_n < 5 * min_n
    } else {
        false
    };
    let group_size = if close { max_n } else { min_n };
    let mut groups = Vec::new();
    let mut members = Vec::new();
    let mut padding = 0;
    for (kind, block_size, layers) in buckets {
        let count = layers.len() as u64;
        let num_groups = count.div_ceil(group_size);
        padding += num_groups * group_size - count;
        for i in 0..num_groups {
            // layers[i::num_groups]
            let mine: Vec<usize> = layers
                .iter()
                .copied()
                .skip(i as usize)
                .step_by(num_groups as usize)
                .collect();
            groups.push(KvGroup {
                kind,
                layers: mine.len() as u64,
                block_size,
            });
            members.push(mine);
        }
    }
    Ok(Planned {
        groups,
        members,
        page_bytes: max_page,
        bytes_per_block: group_size * max_page,
        padding_layers: padding,
        summed_pages: false,
    })
}

/// `get_pp_indices` (vllm/distributed/utils.py): `n // pp` layers per stage,
/// the remainder one each to the second-last, third-last… stages.
pub fn pipeline_partition(
    layers: u64,
    pp: u32,
) -> Result<Vec<std::ops::Range<usize>>, CapacityError> {
    let pp = u64::from(pp.max(1));
    if layers < pp {
        return Err(CapacityError::BadFlag {
            flag: "--pipeline-parallel-size",
            value: pp.to_string(),
            why: "more pipeline stages than the model has layers",
        });
    }
    let mut sizes = vec![layers / pp; pp as usize];
    let rest = (layers % pp) as usize;
    for i in 2..rest + 2 {
        sizes[pp as usize - i] += 1;
    }
    let mut start = 0usize;
    Ok(sizes
        .into_iter()
        .map(|n| {
            let r = start..start + n as usize;
            start += n as usize;
            r
        })
        .collect())
}

/// Each stage's bytes per block: the global groups projected onto the
/// stage's layers (`_project_kv_cache_groups_to_worker`); drafter layers run
/// on the last stage.
pub(super) fn pipeline_stages(
    model: &ModelConfig,
    flags: &VllmFlags,
    specs: &[Spec],
    planned: &Planned,
) -> Result<Vec<PipelineStage>, CapacityError> {
    let n = model.layers.len();
    let ranges = pipeline_partition(n as u64, flags.pipeline_parallel_size)?;
    let last = ranges.len() - 1;
    Ok(ranges
        .iter()
        .enumerate()
        .map(|(s, r)| {
            let on_stage = |layer: usize| r.contains(&layer) || (s == last && layer >= n);
            let bytes_per_block = if planned.summed_pages {
                specs
                    .iter()
                    .filter(|x| on_stage(x.layer))
                    .map(|x| x.page)
                    .sum()
            } else {
                planned
                    .members
                    .iter()
                    .map(|m| m.iter().filter(|l| on_stage(**l)).count() as u64)
                    .max()
                    .unwrap_or(0)
                    * planned.page_bytes
            };
            PipelineStage {
                first_layer: r.start as u64,
                end_layer: r.end as u64,
                bytes_per_block,
            }
        })
        .collect())
}
