"""The camera as the fusion sees it: pinhole intrinsics, the mount in base_link, and CameraInfo's lens
distortion (REP 104 / image_geometry's models) as tensor functions the fusion's kernel calls."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Tuple

import torch

# CameraInfo's distortion models (REP 104 / image_geometry) as the kernels take them: an id and 8 coefficients.
# plumb_bob (k1 k2 p1 p2 k3) and rational_polynomial (k1 k2 p1 p2 k3 k4 k5 k6) are one polynomial model
# (plumb_bob's k4..k6 are 0); equidistant (fisheye: k1 k2 k3 k4) maps the ray's angle.
NO_DISTORTION, POLYNOMIAL, EQUIDISTANT = 0, 1, 2
DISTORTION_MODELS = {"none": NO_DISTORTION, "": NO_DISTORTION, "plumb_bob": POLYNOMIAL,
                     "rational_polynomial": POLYNOMIAL, "equidistant": EQUIDISTANT, "fisheye": EQUIDISTANT}
DISTORTION_COEFFS = {POLYNOMIAL: 8, EQUIDISTANT: 4}
assert (NO_DISTORTION, POLYNOMIAL, EQUIDISTANT) == (0, 1, 2)   # the literals in the TorchScript functions below


@dataclass(frozen=True)
class CameraModel:
    """Pinhole intrinsics, lens distortion (CameraInfo's model and ``d``) and the camera's mount in base_link
    (x fwd, y left, z up; radians)."""

    fx: float = 500.0
    fy: float = 500.0
    cx: float = 320.0
    cy: float = 192.0
    width: int = 640
    height: int = 384
    x: float = 1.5
    y: float = 0.0
    z: float = 1.5
    roll: float = 0.0
    pitch: float = 0.0
    yaw: float = 0.0
    distortion_model: str = "none"
    d: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "d", tuple(float(v) for v in self.d))   # a YAML list, hashable
        self.distortion()   # an unknown model is refused when the model is made, not mid-job

    @classmethod
    def default_for(cls, width: int, height: int, **mount: float) -> "CameraModel":
        """The stated default camera for a ``width`` x ``height`` frame (``bag.calibration.default_intrinsics``)."""
        from rt_runtime.bag.calibration import default_intrinsics

        return cls(**default_intrinsics(width, height), **mount)

    @classmethod
    def like(cls, obj: object) -> "CameraModel":
        """Adopt any object with fx, fy, cx, cy, width, height and a mount pose (its own attributes or
        a ``mount`` with x, y, z, roll, pitch, yaw, as ``rt_runtime.sim.rig.CameraModel`` has), and its
        ``distortion_model`` and ``d`` where it has them."""
        if isinstance(obj, CameraModel):
            return obj
        mount = getattr(obj, "mount", obj)
        kw: dict = {n: getattr(obj, n) for n in ("fx", "fy", "cx", "cy", "width", "height") if hasattr(obj, n)}
        kw.update({n: getattr(mount, n) for n in ("x", "y", "z", "roll", "pitch", "yaw") if hasattr(mount, n)})
        kw = {k: float(v) if k not in ("width", "height") else int(v) for k, v in kw.items()}
        for n in ("distortion_model", "d"):
            if hasattr(obj, n):
                kw[n] = getattr(obj, n)
        return cls(**kw)

    def distortion(self) -> tuple[int, list[float]]:
        """The kernels' model id and 8 coefficients (zeros past the model's own); ``NO_DISTORTION`` when every
        coefficient is 0. ValueError for a model it does not know, or too many coefficients."""
        name = str(self.distortion_model).lower()
        if not any(self.d):
            return NO_DISTORTION, [0.0] * 8
        if name not in DISTORTION_MODELS or DISTORTION_MODELS[name] == NO_DISTORTION:
            raise ValueError(f"camera: distortion_model {self.distortion_model!r} with d {list(self.d)} is not one "
                             f"the projection applies; expected plumb_bob, rational_polynomial or equidistant")
        model = DISTORTION_MODELS[name]
        if len(self.d) > DISTORTION_COEFFS[model]:
            raise ValueError(f"camera: distortion_model {self.distortion_model!r} takes at most "
                             f"{DISTORTION_COEFFS[model]} coefficients in d; found {len(self.d)}")
        return model, list(self.d) + [0.0] * (8 - len(self.d))

    def distortion_reach(self) -> float:
        """The squared radius (normalized image coordinates) the distortion is applied out to: the image's
        farthest corner, undistorted, plus 10 %, and never past where the lens's radial curve turns back. Past
        it a point is moved as the point at that radius on its ray is, scaled out: a polynomial that turns
        back outside the calibrated field (barrel, k1 < 0) would fold a corner far out of view into the image."""
        model, k = self.distortion()
        if model == NO_DISTORTION:
            return 0.0
        r = torch.linspace(0.0, 20.0, 20001, dtype=torch.float64)   # along a ray: the radial curve r -> r_d
        rd, _ = _lens(r, torch.zeros_like(r), model, k)
        falls = torch.nonzero(~(rd[1:] > rd[:-1]))
        turn = float(r[int(falls[0])]) ** 2 if len(falls) else math.inf
        u = torch.tensor([0.0, self.width, 0.0, self.width], dtype=torch.float64)
        v = torch.tensor([0.0, 0.0, self.height, self.height], dtype=torch.float64)
        xd, yd = (u - self.cx) / self.fx, (v - self.cy) / self.fy
        x, y = undistort_normalized(xd, yd, model, k)
        bx, by = _lens(x, y, model, k)
        if not bool(((bx - xd).abs() + (by - yd).abs() < 1e-6).all()):   # the frame reaches past the lens's field
            return turn
        return min(float((x * x + y * y).max()) * 1.21, turn)

    def project(self, xyz: torch.Tensor) -> torch.Tensor:
        """Optical-frame points (..., 3), z forward -> pixels (..., 2) through the lens (distortion applied)."""
        model, k = self.distortion()
        x, y = distort_normalized(xyz[..., 0] / xyz[..., 2], xyz[..., 1] / xyz[..., 2], model, k,
                                  self.distortion_reach())
        return torch.stack([self.fx * x + self.cx, self.fy * y + self.cy], -1)

    def undistort_pixels(self, uv: torch.Tensor) -> torch.Tensor:
        """Pixels (..., 2) as the lens forms them -> where a pinhole camera of the same K would see them."""
        model, k = self.distortion()
        x, y = undistort_normalized((uv[..., 0] - self.cx) / self.fx, (uv[..., 1] - self.cy) / self.fy, model, k)
        return torch.stack([self.fx * x + self.cx, self.fy * y + self.cy], -1)

    def base_to_optical(self) -> tuple[list[list[float]], list[float]]:
        """Rotation and translation taking base_link points into the optical frame (z forward)."""
        cr, sr = math.cos(self.roll), math.sin(self.roll)
        cp, sp = math.cos(self.pitch), math.sin(self.pitch)
        cy, sy = math.cos(self.yaw), math.sin(self.yaw)
        # R_base<-body = Rz(yaw) Ry(pitch) Rx(roll); body x forward; optical = (-y, -z, x) of body.
        r = [[cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr],
             [sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr],
             [-sp, cp * sr, cp * cr]]
        rt = [[r[j][i] for j in range(3)] for i in range(3)]  # body <- base
        opt = [[-v for v in rt[1]], [-v for v in rt[2]], list(rt[0])]
        t = [-sum(opt[i][k] * c for k, c in enumerate((self.x, self.y, self.z))) for i in range(3)]
        return opt, t


def _lens(x: torch.Tensor, y: torch.Tensor, model: int, k: List[float]) -> Tuple[torch.Tensor, torch.Tensor]:
    """The distortion itself on normalized coordinates (x = X/Z, y = Y/Z): OpenCV's and image_geometry's."""
    r2 = x * x + y * y
    if model == 2:   # EQUIDISTANT (TorchScript reads no module ints: pinned by the assert above)
        r = torch.sqrt(r2)
        th = torch.atan(r)
        t2 = th * th
        thd = th * (1.0 + t2 * (k[0] + t2 * (k[1] + t2 * (k[2] + t2 * k[3]))))
        s = torch.where(r > 1e-12, thd / r.clamp(min=1e-12), torch.ones_like(r))   # -> 1 on the axis
        return x * s, y * s
    radial = (1.0 + r2 * (k[0] + r2 * (k[1] + r2 * k[4]))) / (1.0 + r2 * (k[5] + r2 * (k[6] + r2 * k[7])))
    xy = x * y
    return (x * radial + 2.0 * k[2] * xy + k[3] * (r2 + 2.0 * x * x),
            y * radial + k[2] * (r2 + 2.0 * y * y) + 2.0 * k[3] * xy)


def distort_normalized(x: torch.Tensor, y: torch.Tensor, model: int, k: List[float],
                       reach: float) -> Tuple[torch.Tensor, torch.Tensor]:
    """Normalized pinhole coordinates -> the lens's (``CameraModel.distortion``'s model and coefficients); points
    past ``reach`` (``CameraModel.distortion_reach``) are distorted as the point at that radius on their ray, then
    scaled back out: monotone along every ray, so nothing out of view folds into the image."""
    if model == 0:   # NO_DISTORTION
        return x, y
    r2 = x * x + y * y
    s = torch.sqrt(torch.where(r2 > reach, reach / r2.clamp(min=1e-30), torch.ones_like(r2)))
    xd, yd = _lens(x * s, y * s, model, k)
    return xd / s, yd / s


def undistort_normalized(xd: torch.Tensor, yd: torch.Tensor, model: int, k: List[float],
                         iterations: int = 30) -> Tuple[torch.Tensor, torch.Tensor]:
    """The lens's normalized coordinates -> pinhole ones: the inverse of ``_lens`` inside the calibrated field, by
    fixed-point iteration (polynomial, as OpenCV's ``undistortPoints``) or Newton on the angle (equidistant)."""
    if model == 0:   # NO_DISTORTION
        return xd, yd
    if model == 2:   # EQUIDISTANT
        thd = torch.sqrt(xd * xd + yd * yd)
        th = thd.clone()
        for _ in range(iterations):
            t2 = th * th
            f = th * (1.0 + t2 * (k[0] + t2 * (k[1] + t2 * (k[2] + t2 * k[3])))) - thd
            df = 1.0 + t2 * (3.0 * k[0] + t2 * (5.0 * k[1] + t2 * (7.0 * k[2] + t2 * 9.0 * k[3])))
            th = th - f / df
        s = torch.where(thd > 1e-12, torch.tan(th) / thd.clamp(min=1e-12), torch.ones_like(thd))
        return xd * s, yd * s
    x, y = xd.clone(), yd.clone()
    for _ in range(iterations):
        r2 = x * x + y * y
        radial = (1.0 + r2 * (k[0] + r2 * (k[1] + r2 * k[4]))) / (1.0 + r2 * (k[5] + r2 * (k[6] + r2 * k[7])))
        xy = x * y
        x = (xd - 2.0 * k[2] * xy - k[3] * (r2 + 2.0 * x * x)) / radial
        y = (yd - k[2] * (r2 + 2.0 * y * y) - 2.0 * k[3] * xy) / radial
    return x, y
