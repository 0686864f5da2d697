"""LiDAR object detection as an rt_runtime graph: ground → voxels → clusters → oriented boxes.

The five ops, each tensorized (no per-point or per-object Python loops):

1. ``lidar_ground``: the ground plane ``z = a·x + b·y + c``. The lowest return of every coarse BEV
   cell (``scatter_reduce`` amin) is a ground candidate; a robust fit (a low quantile to start, then
   three weighted least-squares passes with shrinking inlier bands) ignores cells whose lowest return
   is an object, and a last fit on each cell's mean ground-band height removes the minimum's noise
   bias. Every point gets its height above that plane.
2. ``lidar_voxelize``: points above the ground band and below ``max_height`` (most returns are
   ground: only these are sorted) are binned into voxels (stable key sort, run starts, cumsum ids,
   ``index_add_`` sums) → voxel centroids and point counts, in the first ``voxel_count`` rows.
3. ``lidar_cluster``: connected components (8-way) of the voxels' BEV occupancy grid. The occupied
   cells are listed once (``unique``) with their 8 neighbours looked up in a dense cell → index
   map; each cell starts with its own index, a 3x3 max over its neighbourhood spreads the largest
   index over the component, and pointer jumping (``label = label[label]``) makes it converge in a
   few passes. Each component's root becomes a cluster id.
4. ``lidar_merge``: a box per cluster (below), then clusters whose centroid lies inside another's
   completed box join it (components over the cluster adjacency, same propagation), and a lone
   column of returns (a "speck": narrower than ``speck_size`` both ways) joins the nearest box
   within ``speck_reach``. A spinning sensor sees a side at a grazing angle as columns over a metre
   apart (one per firing), and cuts a car seen end-on into its end face and the rings behind it;
   this puts it together.
5. ``lidar_boxes``: an L-shape fit per cluster (Zhang et al. 2017, closeness criterion): for a fan
   of headings every cluster's rotated extents come from ``scatter_reduce``, each voxel scores
   1/distance to its nearest edge, and the heading with the best total wins (6° fan, then 1°). A
   vehicle is mostly seen from one side: its end face (a face as long as a vehicle is wide, seen
   across, with at most part of the side behind it) is completed to a vehicle's length away from
   the sensor, a side to a vehicle's width, and a side seen lengthwise to at least a vehicle's
   length (``car_size`` / ``truck_size`` by height; the edge nearest the sensor stays). Cyclists,
   poles and trees are not completed. The box stands on the ground plane; implausible ones (walls,
   specks, poles, trees) get score 0; the best ``MAX_BOXES`` are output by score.

Frames: points come in the sensor frame, as the driver publishes them (rows with NaN coordinates,
the no-returns of an organized cloud, are ignored); ``mount`` (x, y, z, yaw of the sensor in
``base_link``) turns the boxes into ``base_link``. The default mount is the identity, for points
already in ``base_link``. The ground plane is estimated, so the mount height is not needed for it.
Yaw is only defined modulo π (a point cloud has no front): it lies in [-π/2, π/2).
"""
from __future__ import annotations

import dataclasses
import math

import torch

from rt_runtime import Graph, Op, TensorSpec
from pipelines import schema

MAX_VOXELS = 65536
MAX_CLUSTERS = 1024


def on_device(spec: TensorSpec, device: str) -> TensorSpec:
    """The same contract on another device (schema specs are built for the CPU)."""
    return spec if spec.device == device else dataclasses.replace(spec, device=device)


@dataclasses.dataclass(frozen=True)
class LidarParams:
    """Tuning of the LiDAR detector; distances in metres."""

    range_m: float = 76.8          # square BEV window half-width around the vehicle
    ground_cell: float = 2.0       # coarse cell for ground candidates
    ground_band: float = 0.25      # points lower than this above the plane are ground
    max_height: float = 4.5        # ignore overhangs (trees, bridges) above this
    max_object_height: float = 4.2  # taller clusters are poles, trees, buildings: not road users
    voxel: float = 0.2
    cluster_cell: float = 0.3      # BEV cell for connectivity: gaps wider than ~1 cell split objects
    max_prop_iters: int = 64
    n_angles: int = 15             # coarse headings over [0, π/2): 6° steps
    n_fine: int = 7                # fine headings across one coarse step: 1°
    min_voxels: int = 3
    max_length: float = 20.0       # longer is a wall or a hedge, not an object
    max_width: float = 6.0
    min_height: float = 0.3
    tall_height: float = 2.3       # taller than this and ...
    tall_min_length: float = 2.0   # ... shorter than this: a pole or a tree
    half_score_points: float = 15.0  # a cluster with this many points scores 0.5
    min_face: float = 1.2          # shorter faces are no vehicle's end (pedestrians, poles)
    face_slack: float = 0.35       # an end face is at most the vehicle's width plus this; longer is a side
    lengthwise_cos: float = 0.5    # a side seen within 60° of its axis may hide its far end
    face_on_cos: float = 0.7       # an end face is seen more than 45° off its own axis
    rider_height: tuple[float, float] = (1.6, 2.3)  # ... unless as tall as a cyclist
    car_size: tuple[float, float] = (4.5, 1.9)   # length, width completed behind a lone face
    truck_size: tuple[float, float] = (10.0, 2.5)
    truck_min_height: float = 2.5
    merge_margin: float = 0.3
    speck_size: float = 0.15       # narrower in x and y: one firing column, a fragment
    speck_reach: float = 1.2       # a fragment joins the nearest box this close to its centroid
    max_voxels: int = MAX_VOXELS
    max_clusters: int = MAX_CLUSTERS
    mount: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)  # sensor x, y, z, yaw in base_link


def _ground_op(p: LidarParams, dev: torch.device, pts: TensorSpec) -> Op:
    g = math.ceil(2 * p.range_m / p.ground_cell)
    centre = (torch.arange(g, device=dev, dtype=torch.float32) + 0.5) * p.ground_cell - p.range_m
    design = torch.stack([centre.repeat_interleave(g), centre.repeat(g), torch.ones(g * g, device=dev)], 1)
    ridge = torch.diag(torch.tensor([1e2, 1e2, 1e-3], device=dev))  # slopes stay ~0 without evidence
    plane_spec = TensorSpec("plane", (4,), "float32", str(dev))
    height_spec = TensorSpec("height", (f"N<={schema.MAX_POINTS}",), "float32", str(dev))
    cells_spec = TensorSpec("ground_cells", (g * g + 1, 3), "float32", str(dev))  # min z, sum z, count

    prior_row = torch.tensor([0.0, 0.0, 1.0], device=dev) * ridge[2, 2]

    def solve(z: torch.Tensor, w: torch.Tensor, prior: torch.Tensor) -> torch.Tensor:
        aw = design * w[:, None]
        rhs = aw.T @ z + prior_row * prior
        return torch.linalg.solve_ex(aw.T @ design + ridge, rhs)[0]  # solve_ex: no error sync on CUDA

    def ground(points: torch.Tensor, plane: torch.Tensor, height: torch.Tensor, cells: torch.Tensor) -> None:
        n = points.shape[0]
        x, y, z = points[:, 0], points[:, 1], points[:, 2]
        # Cell coordinates: inside the window they are >= 0, where truncation is the floor.
        fx, fy = (x + p.range_m) / p.ground_cell, (y + p.range_m) / p.ground_cell
        inside = (fx >= 0) & (fx < g) & (fy >= 0) & (fy < g) & torch.isfinite(z)
        idx = torch.where(inside, fx.long() * g + fy.long(), g * g)
        cells[:, 0].fill_(math.inf)
        cells[:, 1:].zero_()
        zmin = cells[:, 0].scatter_reduce_(0, idx, torch.where(inside, z, math.inf), "amin")[: g * g]
        have = torch.isfinite(zmin)
        # Most cells' lowest return is ground: start low in their distribution, then refit on inliers.
        c0 = torch.nan_to_num(torch.nanquantile(torch.where(have, zmin, math.nan), 0.25), nan=0.0)
        zmin = torch.where(have, zmin, c0)
        params = torch.stack([c0 * 0, c0 * 0, c0])
        for band in (1.0, 0.5, 0.25):
            params = solve(zmin, (have & ((zmin - design @ params).abs() < band)).float(), c0)
        # The minimum is biased low by range noise: refit on the mean of each cell's ground band.
        near = ((z - (x * params[0] + y * params[1] + params[2])).abs() < p.ground_band).float()
        cells[:, 1].index_add_(0, idx, z * near)
        cells[:, 2].index_add_(0, idx, near)
        cnt = cells[: g * g, 2]
        params = solve(cells[: g * g, 1] / cnt.clamp(min=1), (cnt > 0).float(), params[2])
        plane[:3].copy_(params)
        plane[3] = (cnt > 0).sum()
        torch.sub(z, x * params[0] + y * params[1] + params[2], out=height[:n])

    return Op("lidar_ground", ground, (pts,), (plane_spec, height_spec), workspace=(cells_spec,), cost_us=3000,
              deterministic=dev.type == "cpu")


def _voxelize_op(p: LidarParams, dev: torch.device, pts: TensorSpec, height: TensorSpec) -> Op:
    nxy = math.ceil(2 * p.range_m / p.voxel)
    nz = math.ceil(p.max_height / p.voxel) + 1
    mv = p.max_voxels
    voxels_spec = TensorSpec("voxels", (mv, 4), "float32", str(dev))
    count_spec = on_device(schema.count("voxel_count"), str(dev))
    acc_spec = TensorSpec("voxel_acc", (mv + 1, 4), "float32", str(dev))  # last row: overflow dump
    keys_spec = TensorSpec("voxel_keys", (f"N<={schema.MAX_POINTS}",), "int64", str(dev))
    order_spec = TensorSpec("voxel_order", (f"N<={schema.MAX_POINTS}",), "int64", str(dev))

    def voxelize(points: torch.Tensor, height: torch.Tensor, voxels: torch.Tensor, voxel_count: torch.Tensor,
                 acc: torch.Tensor, keys_ws: torch.Tensor, order_ws: torch.Tensor) -> None:
        n = points.shape[0]
        h = height[:n]
        fx = (points[:, 0] + p.range_m) / p.voxel
        fy = (points[:, 1] + p.range_m) / p.voxel
        keep = (h > p.ground_band) & (h < p.max_height) & (fx >= 0) & (fx < nxy) & (fy >= 0) & (fy < nxy)
        # Most returns are ground: sort the kept ones only (host sync; lidar_cluster syncs anyway).
        # A stable sort keeps each voxel's points in cloud order, so the sums add up the same way.
        sel = keep.nonzero().squeeze(1)
        k = sel.shape[0]
        key = (fx[sel].long() * nxy + fy[sel].long()) * nz + (h[sel] / p.voxel).long()
        skey, order = keys_ws[:k], order_ws[:k]
        torch.sort(key, stable=True, out=(skey, order))
        first = torch.ones_like(skey, dtype=torch.bool)
        torch.ne(skey[1:], skey[:-1], out=first[1:])
        vid = torch.cumsum(first, 0) - 1
        nvox = int(vid[-1]) + 1 if k else 0
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

    return Op("lidar_voxelize", voxelize, (pts, height), (voxels_spec, count_spec),
              workspace=(acc_spec, keys_spec, order_spec), cost_us=6000, deterministic=dev.type == "cpu")


def _cluster_op(p: LidarParams, dev: torch.device, voxels: TensorSpec, vcount: TensorSpec) -> Op:
    g = math.ceil(2 * p.range_m / p.cluster_cell)
    mv, mc = p.max_voxels, p.max_clusters
    di = torch.tensor([-1, -1, -1, 0, 0, 0, 1, 1, 1], device=dev)
    dj = torch.tensor([-1, 0, 1, -1, 0, 1, -1, 0, 1], device=dev)
    label_spec = TensorSpec("voxel_label", (mv,), "int64", str(dev))
    grid_spec = TensorSpec("bev_cell", (g * g,), "int64", str(dev))

    def cluster(voxels: torch.Tensor, voxel_count: torch.Tensor, voxel_label: torch.Tensor,
                grid: torch.Tensor) -> None:
        nv = int(voxel_count)  # host sync: everything below is sized by the occupied cells
        ix = torch.floor((voxels[:nv, 0] + p.range_m) / p.cluster_cell).long().clamp(0, g - 1)
        iy = torch.floor((voxels[:nv, 1] + p.range_m) / p.cluster_cell).long().clamp(0, g - 1)
        cells, cell_of_voxel = torch.unique(ix * g + iy, return_inverse=True)
        m = cells.shape[0]
        ids = torch.arange(m, device=dev)
        grid.fill_(-1)
        grid.index_copy_(0, cells, ids)
        ni, nj = (cells // g)[:, None] + di, (cells % g)[:, None] + dj      # 8-neighbourhood and self
        ok = (ni >= 0) & (ni < g) & (nj >= 0) & (nj < g)
        nbr = torch.where(ok, grid.take(torch.where(ok, ni * g + nj, 0)), -1)
        has = nbr >= 0
        nbr = nbr.clamp(min=0)
        label = ids
        for _ in range(p.max_prop_iters):
            spread = torch.where(has, label.take(nbr), -1).amax(1)
            spread = spread.take(spread)  # pointer jumping: labels never decrease, so this is safe
            if torch.equal(spread, label):
                break
            label = spread
        root = label == ids
        cid = (torch.cumsum(root, 0) - 1).take(label).take(cell_of_voxel)
        voxel_label.fill_(-1)
        voxel_label[:nv].copy_(cid).masked_fill_(cid >= mc, -1)

    return Op("lidar_cluster", cluster, (voxels, vcount), (label_spec,), workspace=(grid_spec,),
              cost_us=3000)


def _segments(n: int, dev: torch.device):
    """Segment reduction over ``n`` clusters (the last one collects the unlabelled voxels)."""

    def seg(idx: torch.Tensor, val: torch.Tensor, how: str, init: float = 0.0) -> torch.Tensor:
        out = torch.full((n,) + val.shape[1:], init, device=dev, dtype=val.dtype)
        return out.scatter_reduce_(0, idx.view(-1, *([1] * (val.dim() - 1))).expand_as(val), val, how)

    return seg


def _rect_fit(lab: torch.Tensor, dx: torch.Tensor, dy: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
              seg) -> tuple[torch.Tensor, ...]:
    """Per cluster and heading: rotated extents and the closeness score (higher = edges fit better)."""
    u, v = dx * cos + dy * sin, dy * cos - dx * sin
    umin, umax = seg(lab, u, "amin", math.inf), seg(lab, u, "amax", -math.inf)
    vmin, vmax = seg(lab, v, "amin", math.inf), seg(lab, v, "amax", -math.inf)
    # Closeness: every voxel near one of the rectangle's edges votes for that heading.
    du = torch.minimum(umax[lab] - u, u - umin[lab])
    dv = torch.minimum(vmax[lab] - v, v - vmin[lab])
    close = seg(lab, 1.0 / torch.minimum(du, dv).clamp(min=0.05), "sum")
    return umin, umax, vmin, vmax, close


def _fit(p: LidarParams, theta: torch.Tensor, fine: torch.Tensor, voxels: torch.Tensor, lab: torch.Tensor,
         n: int, plane: torch.Tensor) -> dict[str, torch.Tensor]:
    """L-shape boxes of ``n`` clusters (sensor frame), completed where only one face was seen."""
    seg = _segments(n, voxels.device)
    x, y, z, npts = voxels.unbind(1)
    f = {"nvox": seg(lab, torch.ones_like(x), "sum"), "npt": seg(lab, npts, "sum")}
    mx, my = seg(lab, x, "sum") / f["nvox"].clamp(min=1), seg(lab, y, "sum") / f["nvox"].clamp(min=1)
    dx, dy = (x - mx[lab])[:, None], (y - my[lab])[:, None]
    # Coarse fan of headings, then a fine fan around each cluster's best one.
    close = _rect_fit(lab, dx, dy, torch.cos(theta), torch.sin(theta), seg)[4]
    th = theta[close.argmax(1)][:, None] + fine
    th_v = th[lab]
    umin, umax, vmin, vmax, close = _rect_fit(lab, dx, dy, torch.cos(th_v), torch.sin(th_v), seg)
    best = close.argmax(1, keepdim=True)
    pick = lambda t: t.gather(1, best).squeeze(1)  # noqa: E731
    bu0, bu1, bv0, bv1, yaw = pick(umin), pick(umax), pick(vmin), pick(vmax), pick(th)
    c, s = torch.cos(yaw), torch.sin(yaw)
    uc, vc = (bu0 + bu1) / 2, (bv0 + bv1) / 2
    length, width = bu1 - bu0, bv1 - bv0
    swap = width > length                                # keep l >= w, heading along the long side
    length, width = torch.where(swap, width, length), torch.where(swap, length, width)
    yaw = torch.where(swap, yaw + math.pi / 2, yaw)
    cx, cy = mx + uc * c - vc * s, my + uc * s + vc * c
    ground = plane[0] * cx + plane[1] * cy + plane[2]
    h = seg(lab, z, "amax", -math.inf) - ground
    # A vehicle is seen from one side only: its end face, or its side, with at most a part of the
    # face around the corner (at grazing angles the beams are over a metre apart along a side). The
    # hidden part extends away from the sensor by a typical size: a vehicle's length behind an end
    # face, its width behind a side; the edge nearest the sensor stays. Cyclist-sized faces stay.
    nx, ny = -torch.sin(yaw), torch.cos(yaw)
    away = torch.where(nx * cx + ny * cy < 0, -1.0, 1.0)
    big = h > p.truck_min_height
    veh_l = torch.where(big, p.truck_size[0], p.car_size[0])
    veh_w = torch.where(big, p.truck_size[1], p.car_size[1])
    rider = (h >= p.rider_height[0]) & (h <= p.rider_height[1])
    pole = (h > p.tall_height) & (length < p.tall_min_length)   # poles and trees: nothing to complete
    # How far the sensor looks along the long axis: an end face is seen across it (a cyclist or a
    # low wall seen lengthwise is no vehicle's end); a side seen lengthwise may hide its far end.
    ux, uy = torch.cos(yaw), torch.sin(yaw)
    along = (ux * cx + uy * cy) / torch.hypot(cx, cy).clamp(min=1e-3)
    end = (length >= p.min_face) & (length <= veh_w + p.face_slack) & (width < veh_w) & ~rider & ~pole \
        & (along.abs() < p.face_on_cos)
    side = (length > veh_w + p.face_slack) & (width < veh_w) & ~pole
    depth = torch.where(end, veh_l, veh_w)
    shift = torch.where(end | side, (depth - width) / 2, 0.0) * away
    cx, cy = cx + shift * nx, cy + shift * ny
    # Seen lengthwise, the far end of a side is hidden or too sparse to cluster: a side shorter than
    # a vehicle extends away from the sensor to one.
    grow = (length > veh_w + p.face_slack) & ~pole & (length < veh_l) & (along.abs() > p.lengthwise_cos)
    ext = torch.where(grow, (veh_l - length) / 2, 0.0) * torch.sign(along)
    cx, cy = cx + ext * ux, cy + ext * uy
    length = torch.where(grow, veh_l, length)
    new_len = torch.where(end, depth, length)
    width = torch.where(end, length, torch.where(side, depth, width))
    yaw = torch.where(end, yaw + math.pi / 2, yaw)
    f.update(mx=mx, my=my, cx=cx, cy=cy, length=new_len, width=width, h=h, ground=ground,
             yaw=torch.remainder(yaw + math.pi / 2, math.pi) - math.pi / 2)
    return f


def _speck(p: LidarParams, f: dict[str, torch.Tensor]) -> torch.Tensor:
    """Clusters too narrow in both ground axes to be a road user on their own (one firing column)."""
    return (f["length"] < p.speck_size) & (f["width"] < p.speck_size)


def _merge_op(p: LidarParams, dev: torch.device, theta: torch.Tensor, fine: torch.Tensor, voxels: TensorSpec,
              vcount: TensorSpec, label: TensorSpec, plane: TensorSpec) -> Op:
    merged_spec = TensorSpec("merged_label", (p.max_voxels,), "int64", str(dev))

    def merge(voxels: torch.Tensor, voxel_count: torch.Tensor, voxel_label: torch.Tensor, plane: torch.Tensor,
              merged: torch.Tensor) -> None:
        nv = int(voxel_count)  # host sync: work on the valid voxels and clusters only
        raw = voxel_label[:nv]
        n = int(raw.max()) + 2 if nv else 1
        lab = torch.where(raw >= 0, raw, n - 1)
        f = _fit(p, theta, fine, voxels[:nv], lab, n, plane)
        # Fragments of one object (an end and the roof rings behind it): a cluster whose centroid lies
        # inside another's completed box joins it.
        c, s = torch.cos(f["yaw"]), torch.sin(f["yaw"])
        dx, dy = f["mx"][None, :] - f["cx"][:, None], f["my"][None, :] - f["cy"][:, None]
        out_u = (dx * c[:, None] + dy * s[:, None]).abs() - f["length"][:, None] / 2   # (box, centroid)
        out_v = (dy * c[:, None] - dx * s[:, None]).abs() - f["width"][:, None] / 2
        inside = (out_u <= p.merge_margin) & (out_v <= p.merge_margin)
        inside &= (f["length"] <= p.max_length)[:, None]  # a wall must not swallow the car parked by it
        inside[-1, :] = False
        inside[:, -1] = False
        # A single column of returns (one firing, several rings) is a piece of a surface seen at a
        # grazing angle, the beams over a metre apart along it: it joins the nearest box within
        # reach, not every one (it must not bridge two objects). Left alone it is dropped (lidar_boxes).
        speck = _speck(p, f)
        speck[-1] = False                                 # the unlabelled voxels stay unlabelled
        gap = torch.hypot(out_u.clamp(min=0.0), out_v.clamp(min=0.0))
        gap = torch.where(speck[:, None] | (f["length"] > p.max_length)[:, None], math.inf, gap)
        gap[-1, :] = math.inf
        near_gap, near_box = gap.min(0)
        join = speck & (near_gap <= p.speck_reach)
        inside[near_box[join], torch.nonzero(join).squeeze(1)] = True
        inside |= inside.T.clone()
        ids = torch.arange(n, device=dev)
        root = ids
        for _ in range(p.max_prop_iters):
            spread = torch.where(inside, root[None, :], ids[:, None]).amax(1).maximum(root)
            spread = spread.take(spread)
            if torch.equal(spread, root):
                break
            root = spread
        merged.fill_(-1)
        merged[:nv].copy_(root.take(lab)).masked_fill_(raw < 0, -1)

    return Op("lidar_merge", merge, (voxels, vcount, label, plane), (merged_spec,), cost_us=5000,
              deterministic=dev.type == "cpu")


def _boxes_op(p: LidarParams, dev: torch.device, theta: torch.Tensor, fine: torch.Tensor, voxels: TensorSpec,
              vcount: TensorSpec, label: TensorSpec, plane: TensorSpec) -> Op:
    boxes_spec = on_device(schema.boxes(), str(dev))
    count_spec = on_device(schema.count("box_count"), str(dev))
    mx0, my0, mz0, myaw = p.mount
    cos_m, sin_m = math.cos(myaw), math.sin(myaw)

    def fit(voxels: torch.Tensor, voxel_count: torch.Tensor, merged: torch.Tensor, plane: torch.Tensor,
            boxes: torch.Tensor, box_count: torch.Tensor) -> None:
        nv = int(voxel_count)  # host sync, as in lidar_merge
        raw = merged[:nv]
        n = int(raw.max()) + 2 if nv else 1
        f = _fit(p, theta, fine, voxels[:nv], torch.where(raw >= 0, raw, n - 1), n, plane)
        length, width, h = f["length"], f["width"], f["h"]
        plausible = ((f["nvox"] >= p.min_voxels) & (length <= p.max_length) & (width <= p.max_width)
                     & (h >= p.min_height) & (h <= p.max_object_height)
                     & ((h <= p.tall_height) | (length >= p.tall_min_length))  # poles and trees are no road users
                     & ~_speck(p, f))
        plausible[-1] = False
        score = torch.where(plausible, f["npt"] / (f["npt"] + p.half_score_points), 0.0)
        # Sensor frame → base_link (the mount is a yaw and a translation).
        cx, cy = f["cx"], f["cy"]
        bx, by = mx0 + cx * cos_m - cy * sin_m, my0 + cx * sin_m + cy * cos_m
        yaw = torch.remainder(f["yaw"] + myaw + math.pi / 2, math.pi) - math.pi / 2
        table = torch.stack([bx, by, f["ground"] + h / 2 + mz0, length, width, h, yaw, score], 1)
        k = min(boxes.shape[0], n)
        top, idx = torch.topk(score, k)
        boxes.zero_()
        torch.index_select(table, 0, idx, out=boxes[:k])
        boxes[:k].mul_((top > 0).unsqueeze(1))
        box_count.copy_((top > 0).sum().view(1))

    return Op("lidar_boxes", fit, (voxels, vcount, label, plane), (boxes_spec, count_spec), cost_us=5000,
              deterministic=dev.type == "cpu")


def build_lidar_graph(device: str = "cpu", **params: object) -> Graph:
    """The LiDAR detector: ``points`` (N<=131072, 4) in base_link → ``boxes`` (MAX_BOXES, 8) + ``box_count``."""
    p = LidarParams(**params)  # type: ignore[arg-type]
    dev = torch.device(device)
    pts = on_device(schema.points(), device)
    ground = _ground_op(p, dev, pts)
    plane, height = ground.outputs
    vox = _voxelize_op(p, dev, pts, height)
    voxels, vcount = vox.outputs
    clus = _cluster_op(p, dev, voxels, vcount)
    (label,) = clus.outputs
    theta = torch.arange(p.n_angles, device=dev, dtype=torch.float32) * (math.pi / 2 / p.n_angles)
    step = math.pi / 2 / p.n_angles
    fine = torch.linspace(-step / 2, step / 2, p.n_fine, device=dev)
    merge = _merge_op(p, dev, theta, fine, voxels, vcount, label, plane)
    boxes = _boxes_op(p, dev, theta, fine, voxels, vcount, merge.outputs[0], plane)
    return Graph("lidar", [ground, vox, clus, merge, boxes], inputs=[pts], outputs=["boxes", "box_count"])
