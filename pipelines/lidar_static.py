"""The LiDAR detector with static shapes: ``pipelines/lidar.py``'s boxes from ops a CUDA graph can record.

The dynamic graph sizes its work by the data: the kept points (``nonzero``), the occupied BEV cells
(``unique``), the voxel and cluster counts (read to the host), boolean-mask indexing, early exits.
None of that can be captured. Here every tensor has a size fixed when the graph is built:

* points at their bound (the executor pads a sweep with NaN rows, ``Graph.pad``), a row kept or not
  by a mask; a sort over every row puts the rows not kept (NaN ones included) after the kept ones;
* voxels at ``max_voxels`` with the count as a *tensor*; rows past it are zero and are masked out;
* ``unique`` becomes a sort of the cells plus run starts; one slot per voxel, the unused ones last;
* clusters at ``max_clusters`` (+1 for the unlabelled voxels); empty ones are masked out;
* the label propagations run their full ``max_prop_iters``: past convergence a pass changes nothing,
  so the labels are those of the dynamic graph's early exit.

The ground op is the dynamic graph's (its kernel already works at any size and ignores NaN rows).
The other kernels reuse ``lidar_kernels``' box fit unchanged. Every real row is computed as in the
dynamic graph, in the same order, and the padding only lands in rows nobody reads (dump rows, empty
clusters), so the outputs are the dynamic graph's (``tests/test_lidar_static.py`` checks it).
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

from rt_runtime import Graph, Op, TensorSpec
from rt_runtime.exec import kernel
from pipelines import lidar, schema
from pipelines.lidar_kernels import BoxRules, _fit, _speck, box_table, heading_fan


@kernel
def voxelize(points: Tensor, height: Tensor, voxels: Tensor, voxel_count: Tensor, acc: Tensor, keys_ws: Tensor,
             order_ws: Tensor, range_m: float, voxel: float, band_m: float, max_height: float, nxy: int,
             nz: int) -> None:
    """lidar_voxelize at fixed size: all rows sorted, the ones not kept last; voxels past the count are zero."""
    mv = voxels.shape[0]
    n = points.shape[0]
    h = height[:n]
    fx = (points[:, 0] + range_m) / voxel
    fy = (points[:, 1] + range_m) / voxel
    keep = (h > band_m) & (h < max_height) & (fx >= 0) & (fx < nxy) & (fy >= 0) & (fy < nxy)
    not_kept = nxy * nxy * nz                          # the sort key of rows not kept: past every voxel's
    # The cells of rows not kept are garbage (NaN → long): zero their coordinates, then key them last.
    fx, fy, hz = torch.where(keep, fx, 0.0), torch.where(keep, fy, 0.0), torch.where(keep, h / voxel, 0.0)
    key = torch.where(keep, (fx.long() * nxy + fy.long()) * nz + hz.long(), not_kept)
    skey, order = keys_ws[:n], order_ws[:n]
    # Stable, as in the dynamic kernel: each voxel's points in cloud order, so its sums add up the same way.
    torch.ops.aten.sort(key, stable=True, dim=0, descending=False, values=skey, indices=order)
    kept = skey != not_kept
    first = torch.ones_like(skey, dtype=torch.bool)
    torch.ne(skey[1:], skey[:-1], out=first[1:])
    vid = torch.cumsum(first, 0) - 1
    nvox = (first & kept).sum()
    vid = torch.where(kept, vid.clamp(max=mv), mv)     # beyond capacity, or not kept: the dump row
    acc.zero_()
    src = points.index_select(0, order)
    src[:, 3] = 1.0                                    # column 3 counts points
    acc.index_add_(0, vid, src)
    torch.div(acc[:mv, :3], acc[:mv, 3:].clamp(min=1.0), out=voxels[:, :3])
    voxels[:, 3].copy_(acc[:mv, 3])
    voxel_count.copy_(nvox.clamp(max=mv).view(1))


@kernel
def cluster(voxels: Tensor, voxel_count: Tensor, voxel_label: Tensor, grid: Tensor, di: Tensor, dj: Tensor,
            range_m: float, cell: float, g: int, max_clusters: int, max_iters: int) -> None:
    """lidar_cluster at fixed size: one slot per voxel for the occupied cells (sorted, the unused slots last)."""
    mv = voxels.shape[0]
    ids = torch.arange(mv, device=voxels.device)
    valid = ids < voxel_count
    ix = torch.floor((voxels[:, 0] + range_m) / cell).long().clamp(0, g - 1)
    iy = torch.floor((voxels[:, 1] + range_m) / cell).long().clamp(0, g - 1)
    key = torch.where(valid, ix * g + iy, g * g)       # invalid voxels: one cell past the grid, sorted last
    # ``unique(return_inverse=True)`` without its data-dependent size: sort, number the runs, scatter back.
    skey, order = torch.sort(key)
    first = torch.ones_like(skey, dtype=torch.bool)
    torch.ne(skey[1:], skey[:-1], out=first[1:])
    run = torch.cumsum(first, 0) - 1
    cell_of_voxel = torch.empty_like(run).scatter_(0, order, run)
    cells = torch.full_like(skey, g * g).scatter_(0, run, skey)   # a run's entries all write its key
    live = cells < g * g                                # slots holding an occupied cell: the first ones
    grid.fill_(-1)
    grid.index_copy_(0, cells, ids)                     # slots not live write grid[g * g], never read
    ni, nj = (cells // g)[:, None] + di, (cells % g)[:, None] + dj      # 8-neighbourhood and self
    ok = (ni >= 0) & (ni < g) & (nj >= 0) & (nj < g)
    nbr = torch.where(ok, grid.take(torch.where(ok, ni * g + nj, 0)), -1)
    # A missing neighbour (and every neighbour of a slot not live) is the slot itself, which is in every
    # slot's max anyway: the max over all nine is the dynamic kernel's max over the present ones.
    # int32 and index_select: the loop below is most of this op's time, and it runs all its passes.
    nbr = torch.where((nbr >= 0) & live[:, None], nbr, ids[:, None]).T.reshape(-1).int()   # 9 rows of slots
    label = ids.int()
    for _ in range(max_iters):                          # no early exit: past convergence a pass is a no-op
        spread = label.index_select(0, nbr).view(9, mv).amax(0)
        label = spread.index_select(0, spread)          # pointer jumping: labels never decrease
    root = label == ids
    cid = (torch.cumsum(root, 0) - 1).index_select(0, label).take(cell_of_voxel)
    voxel_label.copy_(cid).masked_fill_((cid >= max_clusters) | ~valid, -1)


def _labels(label: Tensor, max_clusters: int) -> Tensor:
    """Every voxel's cluster, the unlabelled ones (and those past the count) in the last, ``max_clusters``."""
    return torch.where(label >= 0, label, max_clusters)


@kernel
def merge(voxels: Tensor, voxel_label: Tensor, plane: Tensor, merged: Tensor, theta: Tensor, fine: Tensor,
          s: BoxRules, max_clusters: int) -> None:
    """lidar_merge at fixed size: all ``max_clusters`` clusters, the empty ones masked out."""
    n = max_clusters + 1
    lab = _labels(voxel_label, max_clusters)
    f = _fit(s, theta, fine, voxels, lab, n, plane)
    real = f["nvox"] > 0                                # the dynamic graph has only these (and the last)
    real[-1] = False
    c, sn = torch.cos(f["yaw"]), torch.sin(f["yaw"])
    dx, dy = f["mx"][None, :] - f["cx"][:, None], f["my"][None, :] - f["cy"][:, None]
    out_u = (dx * c[:, None] + dy * sn[:, None]).abs() - f["length"][:, None] / 2   # (box, centroid)
    out_v = (dy * c[:, None] - dx * sn[:, None]).abs() - f["width"][:, None] / 2
    inside = (out_u <= s.merge_margin) & (out_v <= s.merge_margin)
    inside &= (f["length"] <= s.max_length)[:, None]
    inside &= real[:, None] & real[None, :]
    speck = _speck(s, f) & real
    gap = torch.hypot(out_u.clamp(min=0.0), out_v.clamp(min=0.0))
    gap = torch.where(speck[:, None] | (f["length"] > s.max_length)[:, None] | ~real[:, None], math.inf, gap)
    near_gap, near_box = gap.min(0)
    join = speck & (near_gap <= s.speck_reach)
    ids = torch.arange(n, device=voxels.device)
    inside |= (ids[:, None] == near_box[None, :]) & join[None, :]   # a joining speck's column: its nearest box
    inside |= inside.T.clone()
    # As the dynamic kernel's loop, in int32: a root is never below its id, so the id is no default to spread.
    root = ids.int()
    for _ in range(s.max_prop_iters):                   # no early exit: past convergence a pass is a no-op
        spread = torch.where(inside, root[None, :], -1).amax(1).maximum(root)
        root = spread.index_select(0, spread)
    merged.copy_(root.index_select(0, lab)).masked_fill_(voxel_label < 0, -1)


@kernel
def boxes(voxels: Tensor, merged: Tensor, plane: Tensor, out: Tensor, box_count: Tensor, theta: Tensor,
          fine: Tensor, s: BoxRules, max_clusters: int, mx0: float, my0: float, mz0: float, myaw: float) -> None:
    """lidar_boxes at fixed size: the best boxes of all ``max_clusters`` clusters; rows past the count zero."""
    n = max_clusters + 1
    lab = _labels(merged, max_clusters)
    f = _fit(s, theta, fine, voxels, lab, n, plane)
    # Empty clusters have nvox 0 (and NaN extents): below min_voxels, so never plausible.
    table, score = box_table(s, f, mx0, my0, mz0, myaw)
    k = min(out.shape[0], n)
    # A stable sort, not topk: equal scores in cluster order, on every device and at every size.
    top, idx = torch.sort(score, descending=True, stable=True)
    top, idx = top[:k], idx[:k]
    out.zero_()
    # where, not a product: an empty cluster's row is NaN, and NaN · 0 is NaN.
    out[:k].copy_(torch.where((top > 0).unsqueeze(1), table.index_select(0, idx), 0.0))
    box_count.copy_((top > 0).sum().view(1))


def _voxelize_op(p: lidar.LidarParams, dev: torch.device, pts: TensorSpec, height: TensorSpec) -> Op:
    nxy = math.ceil(2 * p.range_m / p.voxel)
    nz = math.ceil(p.max_height / p.voxel) + 1
    mv = p.max_voxels
    voxels_spec = TensorSpec("voxels", (mv, 4), "float32", str(dev))
    count_spec = lidar.on_device(schema.count("voxel_count"), str(dev))
    acc_spec = TensorSpec("voxel_acc", (mv + 1, 4), "float32", str(dev))  # last row: overflow and not-kept dump
    keys_spec = TensorSpec("voxel_keys", (f"N<={schema.MAX_POINTS}",), "int64", str(dev))
    order_spec = TensorSpec("voxel_order", (f"N<={schema.MAX_POINTS}",), "int64", str(dev))
    floats = float(p.range_m), float(p.voxel), float(p.ground_band), float(p.max_height)

    def voxelize_fn(points: torch.Tensor, height: torch.Tensor, voxels: torch.Tensor, voxel_count: torch.Tensor,
                    acc: torch.Tensor, keys_ws: torch.Tensor, order_ws: torch.Tensor) -> None:
        voxelize(points, height, voxels, voxel_count, acc, keys_ws, order_ws, *floats, nxy, nz)

    return Op("lidar_voxelize", voxelize_fn, (pts, height), (voxels_spec, count_spec),
              workspace=(acc_spec, keys_spec, order_spec), cost_us=6000, deterministic=dev.type == "cpu",
              capturable=True)


def _cluster_op(p: lidar.LidarParams, dev: torch.device, voxels: TensorSpec, vcount: TensorSpec) -> Op:
    g = math.ceil(2 * p.range_m / p.cluster_cell)
    di = torch.tensor([-1, -1, -1, 0, 0, 0, 1, 1, 1], device=dev)
    dj = torch.tensor([-1, 0, 1, -1, 0, 1, -1, 0, 1], device=dev)
    label_spec = TensorSpec("voxel_label", (p.max_voxels,), "int64", str(dev))
    grid_spec = TensorSpec("bev_cell", (g * g + 1,), "int64", str(dev))   # last: the unused slots' dump
    range_m, cell, mc, iters = float(p.range_m), float(p.cluster_cell), int(p.max_clusters), int(p.max_prop_iters)

    def cluster_fn(voxels: torch.Tensor, voxel_count: torch.Tensor, voxel_label: torch.Tensor,
                   grid: torch.Tensor) -> None:
        cluster(voxels, voxel_count, voxel_label, grid, di, dj, range_m, cell, g, mc, iters)

    # Deterministic on CUDA too: the duplicate writes (sort ties, the grid's dump entry) write equal values
    # or are never read.
    return Op("lidar_cluster", cluster_fn, (voxels, vcount), (label_spec,), workspace=(grid_spec,),
              cost_us=3000, capturable=True)


def _merge_op(p: lidar.LidarParams, dev: torch.device, theta: torch.Tensor, fine: torch.Tensor,
              voxels: TensorSpec, label: TensorSpec, plane: TensorSpec) -> Op:
    merged_spec = TensorSpec("merged_label", (p.max_voxels,), "int64", str(dev))
    rules, mc = lidar._box_rules(p), int(p.max_clusters)

    def merge_fn(voxels: torch.Tensor, voxel_label: torch.Tensor, plane: torch.Tensor, merged: torch.Tensor) -> None:
        merge(voxels, voxel_label, plane, merged, theta, fine, rules, mc)

    return Op("lidar_merge", merge_fn, (voxels, label, plane), (merged_spec,), cost_us=5000,
              deterministic=dev.type == "cpu", capturable=True)


def _boxes_op(p: lidar.LidarParams, dev: torch.device, theta: torch.Tensor, fine: torch.Tensor,
              voxels: TensorSpec, label: TensorSpec, plane: TensorSpec) -> Op:
    boxes_spec = lidar.on_device(schema.boxes(), str(dev))
    count_spec = lidar.on_device(schema.count("box_count"), str(dev))
    rules, mc = lidar._box_rules(p), int(p.max_clusters)
    mount = tuple(float(v) for v in p.mount)   # x, y, z, yaw of the sensor in base_link

    def boxes_fn(voxels: torch.Tensor, merged: torch.Tensor, plane: torch.Tensor, boxes_out: torch.Tensor,
                 box_count: torch.Tensor) -> None:
        boxes(voxels, merged, plane, boxes_out, box_count, theta, fine, rules, mc, *mount)

    return Op("lidar_boxes", boxes_fn, (voxels, label, plane), (boxes_spec, count_spec), cost_us=5000,
              deterministic=dev.type == "cpu", capturable=True)


def build_static_lidar_graph(p: lidar.LidarParams, device: str) -> Graph:
    """The LiDAR detector with static shapes: every op capturable, ``points`` padded with NaN to its bound."""
    dev = torch.device(device)
    pts = lidar.on_device(schema.points(), device)
    # The ground kernel is shape-static already: it bins NaN rows into a dump cell and gives them NaN heights.
    ground = lidar._ground_op(p, dev, pts, static=True)
    plane, height = ground.outputs
    vox = _voxelize_op(p, dev, pts, height)
    voxels, vcount = vox.outputs
    clus = _cluster_op(p, dev, voxels, vcount)
    (label,) = clus.outputs
    theta, fine = heading_fan(p.n_angles, p.n_fine, dev)
    merge_op = _merge_op(p, dev, theta, fine, voxels, label, plane)
    boxes_op = _boxes_op(p, dev, theta, fine, voxels, merge_op.outputs[0], plane)
    # NaN rows are ignored (no ground cell, no voxel): a sweep padded with them gives the same boxes.
    return Graph("lidar", [ground, vox, clus, merge_op, boxes_op], inputs=[pts], outputs=["boxes", "box_count"],
                 pad={"points": math.nan})
