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
   cells are listed once (``unique``, sorted) with their 8 neighbours found by binary search in that
   list; each cell starts with its own index, a 3x3 max over its neighbourhood spreads the largest
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

Each op's body is a kernel of ``pipelines/lidar_kernels.py`` (``rt_runtime.exec.kernel``: eager, or
compiled where it pays); the op builders here precompute its constant tensors and pass ``LidarParams`` as numbers.
"""
from __future__ import annotations

import dataclasses
import math

import torch

from rt_runtime import Graph, Op, TensorSpec
from pipelines import lidar_kernels as kernels
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


def _ground_op(p: LidarParams, dev: torch.device, pts: TensorSpec, static: bool = False) -> Op:
    g = math.ceil(2 * p.range_m / p.ground_cell)
    centre = (torch.arange(g, device=dev, dtype=torch.float32) + 0.5) * p.ground_cell - p.range_m
    design = torch.stack([centre.repeat_interleave(g), centre.repeat(g), torch.ones(g * g, device=dev)], 1)
    ridge = torch.diag(torch.tensor([1e2, 1e2, 1e-3], device=dev))  # slopes stay ~0 without evidence
    prior_row = torch.tensor([0.0, 0.0, 1.0], device=dev) * ridge[2, 2]
    plane_spec = TensorSpec("plane", (4,), "float32", str(dev))
    height_spec = TensorSpec("height", (f"N<={schema.MAX_POINTS}",), "float32", str(dev))
    cells_spec = TensorSpec("ground_cells", (g * g + 1, 3), "float32", str(dev))  # min z, sum z, count
    range_m, cell, band = float(p.range_m), float(p.ground_cell), float(p.ground_band)

    def ground(points: torch.Tensor, plane: torch.Tensor, height: torch.Tensor, cells: torch.Tensor) -> None:
        kernels.ground(points, plane, height, cells, design, ridge, prior_row, range_m, cell, band, g, static)

    return Op("lidar_ground", ground, (pts,), (plane_spec, height_spec), workspace=(cells_spec,), cost_us=3000,
              deterministic=dev.type == "cpu", capturable=static)


def _voxelize_op(p: LidarParams, dev: torch.device, pts: TensorSpec, height: TensorSpec) -> Op:
    nxy = math.ceil(2 * p.range_m / p.voxel)
    nz = math.ceil(p.max_height / p.voxel) + 1
    mv = p.max_voxels
    voxels_spec = TensorSpec("voxels", (mv, 4), "float32", str(dev))
    count_spec = on_device(schema.count("voxel_count"), str(dev))
    acc_spec = TensorSpec("voxel_acc", (mv + 1, 4), "float32", str(dev))  # last row: overflow dump
    keys_spec = TensorSpec("voxel_keys", (f"N<={schema.MAX_POINTS}",), "int64", str(dev))
    order_spec = TensorSpec("voxel_order", (f"N<={schema.MAX_POINTS}",), "int64", str(dev))
    floats = float(p.range_m), float(p.voxel), float(p.ground_band), float(p.max_height)

    def voxelize(points: torch.Tensor, height: torch.Tensor, voxels: torch.Tensor, voxel_count: torch.Tensor,
                 acc: torch.Tensor, keys_ws: torch.Tensor, order_ws: torch.Tensor) -> None:
        kernels.voxelize(points, height, voxels, voxel_count, acc, keys_ws, order_ws, *floats, nxy, nz)

    return Op("lidar_voxelize", voxelize, (pts, height), (voxels_spec, count_spec),
              workspace=(acc_spec, keys_spec, order_spec), cost_us=6000, deterministic=dev.type == "cpu")


def _cluster_op(p: LidarParams, dev: torch.device, voxels: TensorSpec, vcount: TensorSpec) -> Op:
    g = math.ceil(2 * p.range_m / p.cluster_cell)
    di = torch.tensor([-1, -1, -1, 0, 0, 0, 1, 1, 1], device=dev)
    dj = torch.tensor([-1, 0, 1, -1, 0, 1, -1, 0, 1], device=dev)
    label_spec = TensorSpec("voxel_label", (p.max_voxels,), "int64", str(dev))
    range_m, cell, mc, iters = float(p.range_m), float(p.cluster_cell), int(p.max_clusters), int(p.max_prop_iters)

    def cluster(voxels: torch.Tensor, voxel_count: torch.Tensor, voxel_label: torch.Tensor) -> None:
        kernels.cluster(voxels, voxel_count, voxel_label, di, dj, range_m, cell, g, mc, iters)

    return Op("lidar_cluster", cluster, (voxels, vcount), (label_spec,), cost_us=3000)


def _box_rules(p: LidarParams) -> kernels.BoxRules:
    """The box fit's tuning as the kernels take it: plain numbers."""
    return kernels.BoxRules(
        truck_min_height=float(p.truck_min_height), car_length=float(p.car_size[0]), car_width=float(p.car_size[1]),
        truck_length=float(p.truck_size[0]), truck_width=float(p.truck_size[1]),
        rider_min_height=float(p.rider_height[0]), rider_max_height=float(p.rider_height[1]),
        tall_height=float(p.tall_height), tall_min_length=float(p.tall_min_length), min_face=float(p.min_face),
        face_slack=float(p.face_slack), face_on_cos=float(p.face_on_cos), lengthwise_cos=float(p.lengthwise_cos),
        merge_margin=float(p.merge_margin), speck_size=float(p.speck_size), speck_reach=float(p.speck_reach),
        max_length=float(p.max_length), max_width=float(p.max_width), min_height=float(p.min_height),
        max_object_height=float(p.max_object_height), min_voxels=int(p.min_voxels),
        half_score_points=float(p.half_score_points), max_prop_iters=int(p.max_prop_iters))


def _merge_op(p: LidarParams, dev: torch.device, theta: torch.Tensor, fine: torch.Tensor, voxels: TensorSpec,
              vcount: TensorSpec, label: TensorSpec, plane: TensorSpec) -> Op:
    merged_spec = TensorSpec("merged_label", (p.max_voxels,), "int64", str(dev))
    rules = _box_rules(p)

    def merge(voxels: torch.Tensor, voxel_count: torch.Tensor, voxel_label: torch.Tensor, plane: torch.Tensor,
              merged: torch.Tensor) -> None:
        kernels.merge(voxels, voxel_count, voxel_label, plane, merged, theta, fine, rules)

    return Op("lidar_merge", merge, (voxels, vcount, label, plane), (merged_spec,), cost_us=5000,
              deterministic=dev.type == "cpu")


def _boxes_op(p: LidarParams, dev: torch.device, theta: torch.Tensor, fine: torch.Tensor, voxels: TensorSpec,
              vcount: TensorSpec, label: TensorSpec, plane: TensorSpec) -> Op:
    boxes_spec = on_device(schema.boxes(), str(dev))
    count_spec = on_device(schema.count("box_count"), str(dev))
    rules = _box_rules(p)
    mount = tuple(float(v) for v in p.mount)   # x, y, z, yaw of the sensor in base_link

    def fit(voxels: torch.Tensor, voxel_count: torch.Tensor, merged: torch.Tensor, plane: torch.Tensor,
            boxes: torch.Tensor, box_count: torch.Tensor) -> None:
        kernels.boxes(voxels, voxel_count, merged, plane, boxes, box_count, theta, fine, rules, *mount)

    return Op("lidar_boxes", fit, (voxels, vcount, label, plane), (boxes_spec, count_spec), cost_us=5000,
              deterministic=dev.type == "cpu")


# What the ground under a box can be, relative to the sensor, for ``box_bounds``: the sensor at most
# MAX_MOUNT_HEIGHT above the road (a truck's roof), the road rising or falling at most MAX_GRADE
# (m per m) across the window; steeper is a wall or a ramp, not a road (roads' design limits: 10-12 %).
MAX_MOUNT_HEIGHT = 5.0
MAX_GRADE = 0.12


def box_bounds(**params: object) -> dict[int, tuple[float, float]]:
    """Each ``boxes`` column's bounds (``schema.BOX_COLS``) that the detector built with ``params`` cannot
    leave: the output invariant of its task, derived from its own args (docs/SAFETY.md, "Output invariants").

    A box is a cluster of voxels inside the square window (``range_m`` around the sensor), completed
    to at most ``max_length`` x ``max_width`` (longer ones score 0 and are not output), so its centre is
    within half that box's diagonal of the window; the mount turns it into ``base_link``. Sizes and
    heights are the plausibility rule's; the yaw is defined modulo pi, in [-pi/2, pi/2); the score is
    n / (n + half_score_points). A box outside these is not a far object: the detector never looks there.
    """
    p = LidarParams(**params)  # type: ignore[arg-type]
    mx, my, mz, myaw = (float(v) for v in p.mount)
    reach = p.range_m + 0.5 * math.hypot(p.max_length, p.max_width)   # sensor frame, per axis
    spread = reach * (abs(math.cos(myaw)) + abs(math.sin(myaw)))       # a rotated square's half-width
    slope = MAX_GRADE * reach * math.sqrt(2.0)                         # the ground at the window's corner

    def r(v: float) -> float:
        return round(v, 2)

    return {0: (r(mx - spread - 0.005), r(mx + spread + 0.005)), 1: (r(my - spread - 0.005), r(my + spread + 0.005)),
            2: (r(mz - MAX_MOUNT_HEIGHT - slope - 0.005), r(mz + slope + p.max_object_height + 0.005)),
            3: (0.0, p.max_length), 4: (0.0, p.max_width), 5: (p.min_height, p.max_object_height),
            6: (-1.5708, 1.5708), 7: (0.0, 1.0)}


def build_lidar_graph(device: str = "cpu", static: bool | None = None, **params: object) -> Graph:
    """The LiDAR detector: ``points`` (N<=131072, 4) in base_link → ``boxes`` (MAX_BOXES, 8) + ``box_count``.

    ``static`` (default: off the CPU) builds the same detector with fixed shapes, every op capturable into
    a CUDA graph (``pipelines/lidar_static.py``); on the CPU the dynamic one is faster."""
    p = LidarParams(**params)  # type: ignore[arg-type]
    if static is None:
        static = device != "cpu"
    if static:
        from pipelines.lidar_static import build_static_lidar_graph  # imported here: it builds on this module
        return build_static_lidar_graph(p, device)
    dev = torch.device(device)
    pts = on_device(schema.points(), device)
    ground = _ground_op(p, dev, pts)
    plane, height = ground.outputs
    vox = _voxelize_op(p, dev, pts, height)
    voxels, vcount = vox.outputs
    clus = _cluster_op(p, dev, voxels, vcount)
    (label,) = clus.outputs
    theta, fine = kernels.heading_fan(p.n_angles, p.n_fine, dev)
    merge = _merge_op(p, dev, theta, fine, voxels, vcount, label, plane)
    boxes = _boxes_op(p, dev, theta, fine, voxels, vcount, merge.outputs[0], plane)
    return Graph("lidar", [ground, vox, clus, merge, boxes], inputs=[pts], outputs=["boxes", "box_count"])
