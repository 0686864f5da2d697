"""Train the camera CenterNet (``pipelines.camera``) on simulator frames, and measure it.

Data: every scenario in ``rt_runtime.sim.SCENARIOS`` is simulated for each training seed; a frame
every ``--every`` seconds is rendered with the simulator's own camera model (road users and
scenery, the rig's intrinsics and extrinsics, sensor noise drawn like the recorder draws it). Each
road user's 3D box is projected into the image: the tight rectangle of its 8 corners is the 2D
target, its class is an index into ``schema.CLASSES``. Boxes that are tiny (< ``MIN_HEIGHT_PX`` of
``rt_runtime.replay.quality``),
mostly hidden behind nearer boxes (a coarse z-buffer of projected rectangles, scenery included)
or mostly outside the frame are "don't care": neither targets nor negatives, and a detection on
one is neither a hit nor a false alarm.

Training: CenterNet targets at stride 4 of the 160x96 net input (Gaussian centre heatmaps with
focal loss, L1 on log size and sub-cell offset), horizontal flips and brightness/contrast jitter,
AdamW with a one-cycle schedule, one thread (the machines it runs on are shared; one thread also
makes the run deterministic). Evaluation: the
whole camera graph through ``GraphExecutor`` on held-out seeds; a detection is a hit when its IoU
with an unmatched ground-truth box is >= 0.5, greedily by score (class-agnostic; class accuracy
of the hits is reported too).

The committed weights were produced, with training seed 0, by::

    PYTHONPATH=. python pipelines/train_camera.py --seed 0 --steps 1500 \
        --out pipelines/models/camera_centernet.pt

in 8 min 43 s wall on 2 shared cores under a load average of 4-5 (about 5 min on an idle core).
Scenario seeds 0-5 train, 100-101 are held out: precision 0.888, recall 0.888 there (238 hits,
30 false alarms, 30 misses, class accuracy 1.000). ``pipelines/models/README.md`` has the details.
"""
from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from pipelines.camera import MEAN, NUM_CLASSES, STD, WEIGHTS, CenterNet, build_camera_graph, preprocess_into

TRAIN_SEEDS = tuple(range(6))
HELDOUT_SEEDS = (100, 101)


def frames(scenario: str, seed: int, seconds: float = 20.0, every: float = 0.5, start: float = 0.5):
    """Yield (image uint8 HxWx3, boxes (M, 4) pixels, classes (M,), care (M,) bool) along one run."""
    from rt_runtime.sim import Rig, build_scenario, simulate
    from rt_runtime.sim import camera as simcam

    rig = Rig()
    cam = rig.camera
    sc = build_scenario(scenario, seed)
    tr = simulate(sc, seconds)
    st = sc.static
    for k in np.arange(round(start / 0.01), round(seconds / 0.01), round(every / 0.01)):
        ego = (float(tr.x[k, 0]), float(tr.y[k, 0]), float(tr.yaw[k, 0]))
        near = np.hypot(st[:, 0] - ego[0], st[:, 1] - ego[1]) < cam.max_depth + 20
        boxes = np.vstack([tr.boxes(k), st[near, :7]])
        cls = np.concatenate([tr.classes[1:], st[near, 7].astype(np.uint8)])
        ids = np.concatenate([tr.ids[1:], 100_000 + np.flatnonzero(near).astype(np.uint32)])
        # The recorder's noise stream for camera frame k (kind 1), so frames match recorded bags.
        img = simcam.render(cam, sc.road, ego, float(tr.s[k, 0]), boxes, cls, ids, np.random.default_rng([seed, 1, k]))
        rects, care = project(cam, ego, boxes, cam.width, cam.height)
        dyn = len(tr.ids) - 1
        yield img, rects[:dyn], tr.classes[1:].astype(np.int64) - 1, care[:dyn]


def project(cam, ego: tuple[float, float, float], boxes: np.ndarray, width: int, height: int
            ) -> tuple[np.ndarray, np.ndarray]:
    """Tight image rectangles (M, 4) of map-frame boxes, and whether each is a fair target.

    The replay's quality measure applies the same rules (``rt_runtime.replay.quality.project_boxes``);
    here it runs with the simulator camera's own mount and optical rotation.
    """
    from types import SimpleNamespace

    from rt_runtime.replay.quality import project_boxes

    geometry = SimpleNamespace(width=width, height=height, fx=cam.fx, fy=cam.fy, cx=cam.cx, cy=cam.cy,
                               xyz=np.asarray(cam.mount.translation, np.float64), rot_optical=cam.rotation_optical)
    return project_boxes(geometry, ego, boxes)


def dataset(scenarios, seeds, every: float):
    """All frames of the given runs: net inputs (N, 3, h, w) float16 and per-frame boxes."""
    k = 4
    mean = torch.tensor(MEAN) * 255
    inv_std = 1.0 / (torch.tensor(STD) * 255)
    xs, labels = [], []
    for name in scenarios:
        for seed in seeds:
            for img, rects, cls, care in frames(name, seed, every=every):
                x = torch.empty(1, 3, img.shape[0] // k, img.shape[1] // k)
                block = torch.empty(img.shape[0] // k, img.shape[1] // k, 3)
                rows = torch.empty(img.shape[0] // k, img.shape[1], 3)
                preprocess_into(torch.from_numpy(img), x, block, k, mean, inv_std, rows)
                xs.append(x.half())
                labels.append((rects, cls, care))
    return torch.cat(xs), labels


def targets(labels, hh: int, ww: int, scale: float) -> tuple[torch.Tensor, ...]:
    """CenterNet targets: heat (N, C, h, w), reg (N, 4, h, w), reg mask and loss weight (N, h, w)."""
    n = len(labels)
    heat = torch.zeros(n, NUM_CLASSES, hh, ww)
    reg = torch.zeros(n, 4, hh, ww)
    mask = torch.zeros(n, hh, ww)
    weight = torch.ones(n, hh, ww)
    gy, gx = torch.meshgrid(torch.arange(hh) + 0.5, torch.arange(ww) + 0.5, indexing="ij")
    for i, (rects, cls, care) in enumerate(labels):
        for r, c, ok in zip(torch.from_numpy(rects) / scale, cls, care):
            bw, bh = float(r[2] - r[0]), float(r[3] - r[1])
            if bw <= 0 or bh <= 0:
                continue
            if not ok:  # don't care: no loss inside its rectangle
                weight[i, int(r[1]):math.ceil(r[3]), int(r[0]):math.ceil(r[2])] = 0
                continue
            cu, cv = float(r[0] + r[2]) / 2, float(r[1] + r[3]) / 2
            sx, sy = max(bw / 6, 0.4), max(bh / 6, 0.4)
            g = torch.exp(-((gx - cu) ** 2 / (2 * sx * sx) + (gy - cv) ** 2 / (2 * sy * sy)))
            iu, iv = min(int(cu), ww - 1), min(int(cv), hh - 1)
            heat[i, c] = torch.maximum(heat[i, c], g)
            heat[i, c, iv, iu] = 1.0
            reg[i, :, iv, iu] = torch.tensor([math.log(bw), math.log(bh), cu - iu - 0.5, cv - iv - 0.5])
            mask[i, iv, iu] = 1.0
    return heat, reg, mask, weight


def loss_fn(out, heat, reg, mask, weight) -> torch.Tensor:
    """Focal loss on the heatmaps (normalised by object count) plus L1 on size and offset."""
    logit = out[:, :NUM_CLASSES]
    p = torch.sigmoid(logit)
    pos = heat.eq(1).float()
    log_p, log_1p = F.logsigmoid(logit), F.logsigmoid(-logit)
    pos_loss = ((1 - p) ** 2 * log_p * pos).sum()
    neg_loss = ((1 - heat) ** 4 * p ** 2 * log_1p * (1 - pos) * weight[:, None]).sum()
    npos = pos.sum().clamp(min=1)
    l1 = (F.l1_loss(out[:, NUM_CLASSES:], reg, reduction="none") * mask[:, None]).sum() / npos
    return -(pos_loss + neg_loss) / npos + l1


def train(x: torch.Tensor, labels, steps: int, batch: int, seed: int, log_every: int = 100) -> CenterNet:
    """Train a fresh net on (x, labels) for ``steps`` Adam steps."""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    hh, ww = x.shape[2] // CenterNet.stride, x.shape[3] // CenterNet.stride
    heat, reg, mask, weight = targets(labels, hh, ww, 4.0 * CenterNet.stride)
    net = CenterNet().train()
    opt = torch.optim.AdamW(net.parameters(), lr=3e-3, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=steps, pct_start=0.1)
    t0 = time.perf_counter()
    for step in range(steps):
        idx = torch.randint(0, len(x), (batch,), generator=gen)
        xb, hb, rb, mb, wb = x[idx].float(), heat[idx], reg[idx].clone(), mask[idx], weight[idx]
        flip = torch.rand(batch, generator=gen) < 0.5
        # A mirrored frame is as plausible as the original: mirror targets too (offset u changes sign).
        for t in (xb, hb, mb, wb):
            t[flip] = t[flip].flip(-1)
        rb[flip] = rb[flip].flip(-1)
        rb[flip, 2] = -rb[flip, 2]
        gain = 1 + 0.2 * (torch.rand(batch, 1, 1, 1, generator=gen) * 2 - 1)
        bias = 0.2 * (torch.rand(batch, 1, 1, 1, generator=gen) * 2 - 1)
        loss = loss_fn(net(xb * gain + bias), hb, rb, mb, wb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        if step % log_every == 0 or step == steps - 1:
            print(f"step {step:5d}  loss {loss.item():.3f}  {time.perf_counter() - t0:.0f} s", flush=True)
    return net.eval()


def evaluate(weights: str | None, scenarios, seeds, every: float = 1.0) -> dict[str, float]:
    """Precision and recall of the camera graph (GraphExecutor) on the given runs.

    Matching is the replay's own (``rt_runtime.replay.quality.match_camera``), so the figures the
    training reports and those a replay reports are counted alike.
    """
    from rt_runtime.exec import GraphExecutor
    from rt_runtime.replay.quality import match_camera

    ex = GraphExecutor(build_camera_graph(weights=weights))
    tp = fp = fn = right = 0
    for name in scenarios:
        for seed in seeds:
            for img, rects, cls, care in frames(name, seed, every=every):
                out = ex.run({"image": torch.from_numpy(img)})
                det = out["camera_boxes"][: int(out["camera_box_count"])].numpy()
                a, b, c, d = match_camera(det, rects, cls, care)
                tp, fp, fn, right = tp + a, fp + b, fn + c, right + d
    return {"precision": tp / max(tp + fp, 1), "recall": tp / max(tp + fn, 1), "hits": tp, "false_alarms": fp,
            "misses": fn, "class_accuracy": right / max(tp, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--every", type=float, default=0.5, help="seconds between training frames")
    ap.add_argument("--train-seeds", type=int, default=len(TRAIN_SEEDS), help="use seeds 0..N-1")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=str(WEIGHTS))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from rt_runtime.sim import SCENARIOS

    t0 = time.perf_counter()
    x, labels = dataset(sorted(SCENARIOS), range(args.train_seeds), args.every)
    print(f"{len(x)} training frames, {sum(int(c.sum()) for _, _, c in labels)} boxes "
          f"({time.perf_counter() - t0:.0f} s)", flush=True)
    net = train(x, labels, args.steps, args.batch, args.seed)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    torch.save(net.state_dict(), args.out)
    print(f"saved {args.out} ({Path(args.out).stat().st_size / 1e6:.2f} MB), {time.perf_counter() - t0:.0f} s")
    res = evaluate(args.out, sorted(SCENARIOS), HELDOUT_SEEDS)
    print("held-out " + ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in res.items()))
    print(f"total {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
