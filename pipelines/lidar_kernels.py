"""The LiDAR detector's op bodies as kernels (``rt_runtime.exec.kernel``: eager, jit or aot, chosen at set-up).

Each op of ``pipelines/lidar.py`` is one kernel call here; the algorithms are described there. The
kernels take tensors and plain numbers only (what torch.export and Dynamo trace best): the op
builders precompute the constant tensors (the ground fit's design matrix, the heading fans) and
pass the tuning as floats and ints, those of the box fit as a ``BoxRules``.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor

from rt_runtime.exec import kernel


class BoxRules(NamedTuple):
    """How boxes are completed, merged and judged: ``LidarParams``'s fields of these names (metres,
    cosines; ``car_size`` etc. split in two)."""

    truck_min_height: float
    car_length: float
    car_width: float
    truck_length: float
    truck_width: float
    rider_min_height: float
    rider_max_height: float
    tall_height: float
    tall_min_length: float
    min_face: float
    face_slack: float
    face_on_cos: float
    lengthwise_cos: float
    merge_margin: float
    speck_size: float
    speck_reach: float
    max_length: float
    max_width: float
    min_height: float
    max_object_height: float
    min_voxels: int
    half_score_points: float
    max_prop_iters: int


def _solve(design: Tensor, ridge: Tensor, prior_row: Tensor, z: Tensor, w: Tensor, prior: Tensor) -> Tensor:
    """Weighted ridge least squares of the ground plane, pulled towards ``z = prior``."""
    aw = design * w[:, None]
    rhs = aw.T @ z + prior_row * prior
    return torch.linalg.solve_ex(aw.T @ design + ridge, rhs)[0]  # solve_ex: no error sync on CUDA


def _lower_quartile(v: Tensor, have: Tensor) -> Tensor:
    """``nanquantile(where(have, v, nan), 0.25)`` bit for bit (0 when nothing is had), by two partial
    selections of the had values instead of a sort of all of ``v``."""
    vals = v[have]
    k = vals.shape[0]
    if k == 0:
        return torch.zeros((), dtype=v.dtype, device=v.device)
    # nanquantile's rank 0.25 (k - 1) is exact in float32: its floor, ceiling and fraction are these.
    lo = (k - 1) // 4
    hi = lo + int((k - 1) % 4 > 0)
    w = torch.full((1,), float((k - 1) % 4) * 0.25, dtype=v.dtype, device=v.device)
    below = torch.kthvalue(vals, lo + 1)[0].view(1)
    above = torch.kthvalue(vals, hi + 1)[0].view(1)
    return torch.lerp(below, above, w).view(())   # nanquantile's interpolation, on the same shapes


@kernel
def ground(points: Tensor, plane: Tensor, height: Tensor, cells: Tensor, design: Tensor, ridge: Tensor,
           prior_row: Tensor, range_m: float, cell: float, band_m: float, g: int, static: bool) -> None:
    """lidar_ground: the ground plane from the cells' lowest returns, and every point's height above it.
    ``static``: the start's quartile from ``nanquantile`` over every cell (fixed shapes, capturable) instead of
    a selection among the cells that have a return (faster, the same bits)."""
    n = points.shape[0]
    # x, y, z as contiguous rows: the point-wise ops below run on packed floats, not every 4th one.
    xyz = points[:, :3].t().contiguous()
    x, y, z = xyz[0], xyz[1], xyz[2]
    # Cell coordinates: inside the window they are >= 0, where truncation is the floor.
    fxy = (xyz[:2] + range_m) / cell
    inside = ((fxy >= 0) & (fxy < g)).all(0) & torch.isfinite(z)
    ixy = fxy.long()
    idx = torch.where(inside, ixy[0] * g + ixy[1], g * g)
    cells[:, 0].fill_(math.inf)
    cells[:, 1:].zero_()
    zmin = cells[:, 0].scatter_reduce_(0, idx, torch.where(inside, z, math.inf), "amin")[: g * g]
    have = torch.isfinite(zmin)
    # Most cells' lowest return is ground: start low in their distribution, then refit on inliers.
    if static:
        c0 = torch.nan_to_num(torch.nanquantile(torch.where(have, zmin, math.nan), 0.25), nan=0.0)
    else:
        c0 = _lower_quartile(zmin, have)
    zmin = torch.where(have, zmin, c0)
    params = torch.stack([c0 * 0, c0 * 0, c0])
    for band in [1.0, 0.5, 0.25]:
        params = _solve(design, ridge, prior_row, zmin, (have & ((zmin - design @ params).abs() < band)).float(), c0)
    # The minimum is biased low by range noise: refit on the mean of each cell's ground band.
    near = ((z - (x * params[0] + y * params[1] + params[2])).abs() < band_m).float()
    cells[:, 1].index_add_(0, idx, z * near)
    cells[:, 2].index_add_(0, idx, near)
    cnt = cells[: g * g, 2]
    params = _solve(design, ridge, prior_row, cells[: g * g, 1] / cnt.clamp(min=1), (cnt > 0).float(), params[2])
    plane[:3].copy_(params)
    plane[3] = (cnt > 0).sum()
    torch.sub(z, x * params[0] + y * params[1] + params[2], out=height[:n])


@kernel
def voxelize(points: Tensor, height: Tensor, voxels: Tensor, voxel_count: Tensor, acc: Tensor, keys_ws: Tensor,
             order_ws: Tensor, range_m: float, voxel: float, band_m: float, max_height: float, nxy: int,
             nz: int) -> None:
    """lidar_voxelize: centroids and point counts of the voxels above the ground band."""
    mv = voxels.shape[0]
    n = points.shape[0]
    h = height[:n]
    # Most returns are ground: the height band alone drops them, so the window test and everything
    # after it run on the points above the ground only (host sync; lidar_cluster syncs anyway).
    above = ((h > band_m) & (h < max_height)).nonzero().squeeze(1)
    fx = (points[above, 0] + range_m) / voxel
    fy = (points[above, 1] + range_m) / voxel
    inside = ((fx >= 0) & (fx < nxy) & (fy >= 0) & (fy < nxy)).nonzero().squeeze(1)
    # A stable sort keeps each voxel's points in cloud order, so the sums add up the same way.
    sel = above[inside]
    k = sel.shape[0]
    key = (fx[inside].long() * nxy + fy[inside].long()) * nz + (h[sel] / voxel).long()
    skey, order = keys_ws[:k], order_ws[:k]
    # The aten op by name: TorchScript has no out=(values, indices) for torch.sort, eager Python no values=.
    torch.ops.aten.sort(key, stable=True, dim=0, descending=False, values=skey, indices=order)
    first = torch.ones_like(skey, dtype=torch.bool)
    torch.ne(skey[1:], skey[:-1], out=first[1:])
    vid = torch.cumsum(first, 0) - 1
    nvox = int(vid[-1]) + 1 if k > 0 else 0
    m = min(nvox, mv)
    vid.clamp_(max=mv)                               # beyond capacity: the overflow dump row
    acc[:m].zero_()
    acc[mv].zero_()
    src = points[sel[order]]
    src[:, 3] = 1.0                                  # column 3 counts points
    acc.index_add_(0, vid, src)
    # Rows past the count are left as they are: every reader slices voxels[:voxel_count].
    torch.div(acc[:m, :3], acc[:m, 3:].clamp(min=1.0), out=voxels[:m, :3])
    voxels[:m, 3].copy_(acc[:m, 3])
    voxel_count.fill_(m)


@kernel
def cluster(voxels: Tensor, voxel_count: Tensor, voxel_label: Tensor, di: Tensor, dj: Tensor,
            range_m: float, cell: float, g: int, max_clusters: int, max_iters: int) -> None:
    """lidar_cluster: 8-connected components of the voxels' BEV cells; a cluster id per voxel."""
    nv = int(voxel_count)  # host sync: everything below is sized by the occupied cells
    voxel_label.fill_(-1)
    if nv == 0:
        return
    ix = torch.floor((voxels[:nv, 0] + range_m) / cell).long().clamp(0, g - 1)
    iy = torch.floor((voxels[:nv, 1] + range_m) / cell).long().clamp(0, g - 1)
    cells, cell_of_voxel = torch.unique(ix * g + iy, return_inverse=True)
    m = cells.shape[0]
    ids = torch.arange(m, device=cells.device)
    ni, nj = (cells // g)[:, None] + di, (cells % g)[:, None] + dj      # 8-neighbourhood and self
    ok = (ni >= 0) & (ni < g) & (nj >= 0) & (nj < g)
    # A neighbour's index is its position in the sorted occupied cells (a few hundred): a binary
    # search, not a dense g x g map that would have to be cleared every sweep.
    key = torch.where(ok, ni * g + nj, -1)
    pos = torch.searchsorted(cells, key).clamp(max=m - 1)
    nbr = torch.where(ok & (cells.take(pos) == key), pos, -1)
    has = nbr >= 0
    nbr = nbr.clamp(min=0)
    label = ids
    for _ in range(max_iters):
        spread = torch.where(has, label.take(nbr), -1).amax(1)
        spread = spread.take(spread)  # pointer jumping: labels never decrease, so this is safe
        if torch.equal(spread, label):
            break
        label = spread
    root = label == ids
    cid = (torch.cumsum(root, 0) - 1).take(label).take(cell_of_voxel)
    voxel_label[:nv].copy_(cid).masked_fill_(cid >= max_clusters, -1)


def _seg(n: int, idx: Tensor, val: Tensor, how: str, init: float = 0.0) -> Tensor:
    """Segment reduction of ``val``'s rows over ``n`` clusters (the last one collects the unlabelled voxels)."""
    out = torch.full([n] + list(val.shape[1:]), init, device=val.device, dtype=val.dtype)
    return out.scatter_reduce_(0, idx.view([-1] + [1] * (val.dim() - 1)).expand_as(val), val, how)


def _rect_fit(n: int, lab: Tensor, dx: Tensor, dy: Tensor, cos: Tensor,
              sin: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Per cluster and heading: rotated extents and the closeness score (higher = edges fit better)."""
    u, v = dx * cos + dy * sin, dy * cos - dx * sin
    umin, umax = _seg(n, lab, u, "amin", math.inf), _seg(n, lab, u, "amax", -math.inf)
    vmin, vmax = _seg(n, lab, v, "amin", math.inf), _seg(n, lab, v, "amax", -math.inf)
    # Closeness: every voxel near one of the rectangle's edges votes for that heading.
    du = torch.minimum(umax[lab] - u, u - umin[lab])
    dv = torch.minimum(vmax[lab] - v, v - vmin[lab])
    close = _seg(n, lab, 1.0 / torch.minimum(du, dv).clamp(min=0.05), "sum")
    return umin, umax, vmin, vmax, close


def _fit(s: BoxRules, theta: Tensor, fine: Tensor, voxels: Tensor, lab: Tensor, n: int,
         plane: Tensor) -> dict[str, Tensor]:
    """L-shape boxes of ``n`` clusters (sensor frame), completed where only one face was seen."""
    x, y, z, npts = voxels.unbind(1)
    nvox = _seg(n, lab, torch.ones_like(x), "sum")
    f = {"nvox": nvox, "npt": _seg(n, lab, npts, "sum")}
    mx, my = _seg(n, lab, x, "sum") / nvox.clamp(min=1), _seg(n, lab, y, "sum") / nvox.clamp(min=1)
    dx, dy = (x - mx[lab])[:, None], (y - my[lab])[:, None]
    # Coarse fan of headings, then a fine fan around each cluster's best one.
    close = _rect_fit(n, lab, dx, dy, torch.cos(theta), torch.sin(theta))[4]
    th = theta[close.argmax(1)][:, None] + fine
    th_v = th[lab]
    umin, umax, vmin, vmax, close = _rect_fit(n, lab, dx, dy, torch.cos(th_v), torch.sin(th_v))
    best = close.argmax(1, keepdim=True)
    bu0, bu1 = umin.gather(1, best).squeeze(1), umax.gather(1, best).squeeze(1)
    bv0, bv1 = vmin.gather(1, best).squeeze(1), vmax.gather(1, best).squeeze(1)
    yaw = th.gather(1, best).squeeze(1)
    c, sn = torch.cos(yaw), torch.sin(yaw)
    uc, vc = (bu0 + bu1) / 2, (bv0 + bv1) / 2
    length, width = bu1 - bu0, bv1 - bv0
    swap = width > length                                # keep l >= w, heading along the long side
    length, width = torch.where(swap, width, length), torch.where(swap, length, width)
    yaw = torch.where(swap, yaw + math.pi / 2, yaw)
    cx, cy = mx + uc * c - vc * sn, my + uc * sn + vc * c
    ground = plane[0] * cx + plane[1] * cy + plane[2]
    h = _seg(n, lab, z, "amax", -math.inf) - ground
    # A vehicle is seen from one side only: its end face, or its side, with at most a part of the
    # face around the corner (at grazing angles the beams are over a metre apart along a side). The
    # hidden part extends away from the sensor by a typical size: a vehicle's length behind an end
    # face, its width behind a side; the edge nearest the sensor stays. Cyclist-sized faces stay.
    nx, ny = -torch.sin(yaw), torch.cos(yaw)
    away = torch.where(nx * cx + ny * cy < 0, -1.0, 1.0)
    big = h > s.truck_min_height
    veh_l = torch.where(big, s.truck_length, s.car_length)
    veh_w = torch.where(big, s.truck_width, s.car_width)
    rider = (h >= s.rider_min_height) & (h <= s.rider_max_height)
    pole = (h > s.tall_height) & (length < s.tall_min_length)   # poles and trees: nothing to complete
    # How far the sensor looks along the long axis: an end face is seen across it (a cyclist or a
    # low wall seen lengthwise is no vehicle's end); a side seen lengthwise may hide its far end.
    ux, uy = torch.cos(yaw), torch.sin(yaw)
    along = (ux * cx + uy * cy) / torch.hypot(cx, cy).clamp(min=1e-3)
    end = (length >= s.min_face) & (length <= veh_w + s.face_slack) & (width < veh_w) & ~rider & ~pole \
        & (along.abs() < s.face_on_cos)
    side = (length > veh_w + s.face_slack) & (width < veh_w) & ~pole
    depth = torch.where(end, veh_l, veh_w)
    shift = torch.where(end | side, (depth - width) / 2, 0.0) * away
    cx, cy = cx + shift * nx, cy + shift * ny
    # Seen lengthwise, the far end of a side is hidden or too sparse to cluster: a side shorter than
    # a vehicle extends away from the sensor to one.
    grow = (length > veh_w + s.face_slack) & ~pole & (length < veh_l) & (along.abs() > s.lengthwise_cos)
    ext = torch.where(grow, (veh_l - length) / 2, 0.0) * torch.sign(along)
    cx, cy = cx + ext * ux, cy + ext * uy
    length = torch.where(grow, veh_l, length)
    f["length"] = torch.where(end, depth, length)
    f["width"] = torch.where(end, length, torch.where(side, depth, width))
    yaw = torch.where(end, yaw + math.pi / 2, yaw)
    f["mx"], f["my"], f["cx"], f["cy"], f["h"], f["ground"] = mx, my, cx, cy, h, ground
    f["yaw"] = torch.remainder(yaw + math.pi / 2, math.pi) - math.pi / 2
    return f


def _speck(s: BoxRules, f: dict[str, Tensor]) -> Tensor:
    """Clusters too narrow in both ground axes to be a road user on their own (one firing column)."""
    return (f["length"] < s.speck_size) & (f["width"] < s.speck_size)


def _clusters(voxel_count: Tensor, label: Tensor) -> tuple[int, Tensor, int, Tensor]:
    """The valid voxels' count and labels, the number of clusters plus one, and the labels with the
    unlabelled voxels (-1) in that last cluster."""
    nv = int(voxel_count)  # host sync: work on the valid voxels and clusters only
    raw = label[:nv]
    n = int(raw.max()) + 2 if nv > 0 else 1
    return nv, raw, n, torch.where(raw >= 0, raw, n - 1)


@kernel
def merge(voxels: Tensor, voxel_count: Tensor, voxel_label: Tensor, plane: Tensor, merged: Tensor, theta: Tensor,
          fine: Tensor, s: BoxRules) -> None:
    """lidar_merge: clusters inside another's completed box, and lone columns near one, join it."""
    nv, raw, n, lab = _clusters(voxel_count, voxel_label)
    f = _fit(s, theta, fine, voxels[:nv], lab, n, plane)
    # Fragments of one object (an end and the roof rings behind it): a cluster whose centroid lies
    # inside another's completed box joins it.
    c, sn = torch.cos(f["yaw"]), torch.sin(f["yaw"])
    dx, dy = f["mx"][None, :] - f["cx"][:, None], f["my"][None, :] - f["cy"][:, None]
    out_u = (dx * c[:, None] + dy * sn[:, None]).abs() - f["length"][:, None] / 2   # (box, centroid)
    out_v = (dy * c[:, None] - dx * sn[:, None]).abs() - f["width"][:, None] / 2
    inside = (out_u <= s.merge_margin) & (out_v <= s.merge_margin)
    inside &= (f["length"] <= s.max_length)[:, None]  # a wall must not swallow the car parked by it
    inside[-1, :] = False
    inside[:, -1] = False
    # A single column of returns (one firing, several rings) is a piece of a surface seen at a
    # grazing angle, the beams over a metre apart along it: it joins the nearest box within
    # reach, not every one (it must not bridge two objects). Left alone it is dropped (lidar_boxes).
    speck = _speck(s, f)
    speck[-1] = False                                 # the unlabelled voxels stay unlabelled
    gap = torch.hypot(out_u.clamp(min=0.0), out_v.clamp(min=0.0))
    gap = torch.where(speck[:, None] | (f["length"] > s.max_length)[:, None], math.inf, gap)
    gap[-1, :] = math.inf
    near_gap, near_box = gap.min(0)
    join = speck & (near_gap <= s.speck_reach)
    inside[near_box[join], torch.nonzero(join).squeeze(1)] = True
    inside |= inside.T.clone()
    ids = torch.arange(n, device=voxels.device)
    root = ids
    for _ in range(s.max_prop_iters):
        spread = torch.where(inside, root[None, :], ids[:, None]).amax(1).maximum(root)
        spread = spread.take(spread)
        if torch.equal(spread, root):
            break
        root = spread
    merged.fill_(-1)
    merged[:nv].copy_(root.take(lab)).masked_fill_(raw < 0, -1)


def box_table(s: BoxRules, f: dict[str, Tensor], mx0: float, my0: float, mz0: float,
              myaw: float) -> tuple[Tensor, Tensor]:
    """Each fitted cluster's box row in ``base_link`` (sensor mount ``mx0, my0, mz0, myaw``) and its score
    (0 for an implausible one: walls, specks, poles, trees; and for the last row, the unclustered)."""
    length, width, h = f["length"], f["width"], f["h"]
    plausible = ((f["nvox"] >= s.min_voxels) & (length <= s.max_length) & (width <= s.max_width)
                 & (h >= s.min_height) & (h <= s.max_object_height)
                 & ((h <= s.tall_height) | (length >= s.tall_min_length))  # poles and trees are no road users
                 & ~_speck(s, f))
    plausible[-1] = False
    score = torch.where(plausible, f["npt"] / (f["npt"] + s.half_score_points), 0.0)
    # Sensor frame → base_link (the mount is a yaw and a translation).
    cos_m, sin_m = math.cos(myaw), math.sin(myaw)
    cx, cy = f["cx"], f["cy"]
    bx, by = mx0 + cx * cos_m - cy * sin_m, my0 + cx * sin_m + cy * cos_m
    yaw = torch.remainder(f["yaw"] + myaw + math.pi / 2, math.pi) - math.pi / 2
    return torch.stack([bx, by, f["ground"] + h / 2 + mz0, length, width, h, yaw, score], 1), score


def heading_fan(n_angles: int, n_fine: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """The L-shape fit's headings: a coarse fan over [0, pi/2), and the fine offsets around its best."""
    theta = torch.arange(n_angles, device=device, dtype=torch.float32) * (math.pi / 2 / n_angles)
    step = math.pi / 2 / n_angles
    return theta, torch.linspace(-step / 2, step / 2, n_fine, device=device)


@kernel
def boxes(voxels: Tensor, voxel_count: Tensor, merged: Tensor, plane: Tensor, out: Tensor, box_count: Tensor,
          theta: Tensor, fine: Tensor, s: BoxRules, mx0: float, my0: float, mz0: float, myaw: float) -> None:
    """lidar_boxes: a box per merged cluster, scored, the best ones in ``base_link`` (sensor mount
    ``mx0, my0, mz0, myaw``)."""
    nv, raw, n, lab = _clusters(voxel_count, merged)
    f = _fit(s, theta, fine, voxels[:nv], lab, n, plane)
    table, score = box_table(s, f, mx0, my0, mz0, myaw)
    k = min(out.shape[0], n)
    top, idx = torch.topk(score, k)
    out.zero_()
    torch.index_select(table, 0, idx, out=out[:k])
    # masked_fill_, not a product: a degenerate cluster's row may hold inf or NaN, and 0 x NaN is NaN
    out[:k].masked_fill_((top <= 0).unsqueeze(1), 0.0)
    box_count.copy_((top > 0).sum().view(1))
