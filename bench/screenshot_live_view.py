"""A screenshot of Foxglove Studio itself opening a ``--foxglove-mcap`` recording with ``config/foxglove_layout.json``.

The app is Foxglove Studio 1.48.0, the open-source (MPL-2.0) web app, from its npm package
``@foxglove/studio-base`` (the package ships the app's built web bundle, ``assets/index.js``, a UMD module that
needs React 17 beside it). Lichtblick, its open-source fork, has no runnable build on npm (``@lichtblick/suite``
is only its extension API's types), so this is the one Foxglove-family app the npm registry gives. This script:

* records the built-in scenario's first 6 s (``rt-runtime replay --until 6 --foxglove-mcap FILE``, as
  ``bench/render_live_view.py`` records it; replay options after ``--``), or takes an existing recording;
* serves, on 127.0.0.1 only (a port the OS picks), a page that mounts the app's ``App`` component the way
  Foxglove's own ``studio-web`` package does (its data sources, an in-memory layout storage holding the layout
  file unchanged as a stored layout; the app migrates it as it does a layout imported from a file), the app's
  assets, and the recording (with HTTP Range support, as the app's *Remote file* source reads it);
* opens it in headless Chromium (``playwright-core``, software WebGL through SwiftShader for the 3D panel) at
  ``?ds=remote-file&ds.url=.../live.mcap&layoutId=...&time=END``: the app's own deep link, which opens the
  recording, selects the layout and seeks to the end of the recording;
* waits for the panels, shows the data source sidebar's *Problems* tab when the app reports any (else its
  *Topics*), prints the problems, and writes the screenshot (default 1600 x 1000, ``docs/live_view_app.png``).

Install (once, outside the repository; about 200 MB of node_modules)::

    apt-get install -y --no-install-recommends chromium          # Debian's chromium (/usr/bin/chromium)
    mkdir -p /opt/viewer && cd /opt/viewer && npm init -y
    npm install @foxglove/studio-base@1.48.0 react@17.0.2 react-dom@17.0.2 playwright-core

Run (from the repository root; node and chromium on PATH or named by ``--chromium``)::

    .venv/bin/python bench/screenshot_live_view.py -- --timing measured     # record, then screenshot
    .venv/bin/python bench/screenshot_live_view.py run.mcap                 # an existing recording
    .venv/bin/python bench/screenshot_live_view.py --viewer /opt/viewer --out /tmp/shot.png -- --speculate

Not a benchmark: ``make bench`` runs ``bench/bench_*.py`` only.
"""
from __future__ import annotations

import argparse
import datetime as dt
import http.server
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from render_live_view import record  # noqa: E402  (the same recording as the matplotlib rendering)

LAYOUT_ID = "rt-runtime-foxglove-layout"

PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>Foxglove Studio</title>
<style>html,body,#root{margin:0;padding:0;width:100%;height:100%;overflow:hidden}</style>
</head><body><div id="root"></div>
<script src="/react.js"></script>
<script src="/react-dom.js"></script>
<script>window.react = window.React; window["react-dom"] = window.ReactDOM;  // the bundle's UMD externals</script>
<script src="/assets/index.js"></script>
<script src="/host.js"></script>
</body></html>
"""

# What Foxglove's studio-web package gives the App component, less what needs a server: the layout storage
# is in memory and holds our layout file; the profile names it the current layout.
HOST = """
(async () => {
  const LAYOUT_ID = %(layout_id)s;
  const data = await (await fetch("/layout.json")).json();
  const now = new Date().toISOString();
  const layouts = new Map([[LAYOUT_ID, {
    id: LAYOUT_ID, name: %(layout_name)s, permission: "CREATOR_WRITE",
    baseline: { data, savedAt: now }, working: undefined, syncInfo: undefined }]]);
  const layoutStorage = {
    list: async (ns) => [...layouts.values()],
    get: async (ns, id) => layouts.get(id),
    put: async (ns, layout) => { layouts.set(layout.id, layout); return layout; },
    delete: async (ns, id) => { layouts.delete(id); },
    importLayouts: async () => {},
    migrateUnnamespacedLayouts: async () => {},
  };
  localStorage.setItem("studio.profile-data", JSON.stringify({ currentLayoutId: LAYOUT_ID }));
  const config = new Map([["colorScheme", "dark"], ["telemetry.telemetryEnabled", false],
                          ["telemetry.crashReportingEnabled", false]]);
  const listeners = new Map();
  const appConfiguration = {
    get: (k) => config.get(k),
    set: async (k, v) => { config.set(k, v); for (const cb of listeners.get(k) ?? []) cb(v); },
    addChangeListener: (k, cb) => { if (!listeners.has(k)) listeners.set(k, new Set()); listeners.get(k).add(cb); },
    removeChangeListener: (k, cb) => { listeners.get(k)?.delete(cb); },
  };
  await window.initI18n();
  await window.waitForFonts();
  ReactDOM.render(React.createElement(window.App, {
    appConfiguration, layoutStorage, extensionLoaders: [],
    dataSources: [new window.RemoteDataSourceFactory(), new window.McapLocalDataSourceFactory()],
    deepLinks: [window.location.href], enableGlobalCss: true, enableLaunchPreferenceScreen: false,
  }), document.getElementById("root"));
})().catch((e) => { console.error("host page failed:", String(e)); });
"""

DRIVER = r"""
const { chromium } = require(process.env.PLAYWRIGHT_CORE);
const [url, out, width, height, settle, chromiumPath] = process.argv.slice(2);
(async () => {
  const browser = await chromium.launch({
    executablePath: chromiumPath, headless: true,
    args: ["--no-sandbox", "--use-gl=angle", "--use-angle=swiftshader", "--enable-unsafe-swiftshader",
           "--ignore-gpu-blocklist"],
  });
  try {
    const page = await browser.newPage({ viewport: { width: +width, height: +height }, deviceScaleFactor: 1 });
    page.on("pageerror", (e) => console.log("page error:", String(e).slice(0, 300)));
    page.on("console", (m) => { if (m.text().startsWith("host page failed")) console.log(m.text()); });
    await page.goto(url, { waitUntil: "load" });
    // the recording is open and the player has sought: the RawMessages panel shows /rt/live's message
    await page.getByText("rt_runtime.Live @").first().waitFor({ timeout: 120000 });
    await page.waitForTimeout(+settle * 1000);
    const hint = page.getByText("Open settings to configure topics and layers.");   // the 3D panel's first-run tip
    if (await hint.count()) await hint.locator("xpath=..").locator("button").first().click().catch(() => {});
    const problems = page.getByRole("tab", { name: /Problems/ });
    if (await problems.count() && /\d/.test(await problems.innerText())) {
      await problems.click();
      await page.waitForTimeout(500);
    }
    const sidebar = await page.locator("body").innerText();
    for (const line of sidebar.split("\n")) if (/^Error|^Received|^Warning/.test(line)) console.log("app problem:", line);
    await page.waitForTimeout(1000);
    await page.screenshot({ path: out });
    console.log("window title:", await page.title());
  } finally {
    await browser.close();
  }
})().catch((e) => { console.error(String(e)); process.exit(1); });
"""


class Site(http.server.BaseHTTPRequestHandler):
    """GET/HEAD of a fixed set of files and the app's assets, with Range (the app reads an MCAP in ranges)."""

    files: dict[str, Path] = {}
    assets = Path()

    def log_message(self, fmt: str, *args: object) -> None:
        pass

    def _file(self) -> Path | None:
        path = self.path.split("?", 1)[0]
        if path in self.files:
            return self.files[path]
        if path.startswith("/assets/"):
            p = (self.assets / path[len("/assets/"):]).resolve()
            if p.is_file() and self.assets in p.parents:
                return p
        return None

    def do_HEAD(self) -> None:
        self._send(body=False)

    def do_GET(self) -> None:
        self._send(body=True)

    def _send(self, body: bool) -> None:
        p = self._file()
        if p is None:
            self.send_error(404)
            return
        data = p.read_bytes()
        start, end, status = 0, len(data) - 1, 200
        rng = self.headers.get("Range", "")
        if rng.startswith("bytes=") and data:
            a, _, b = rng[6:].split(",")[0].partition("-")
            start, end = (int(a), min(int(b) if b else end, end)) if a else (max(0, len(data) - int(b)), end)
            status = 206
        self.send_response(status)
        ctype = {".js": "text/javascript", ".html": "text/html", ".json": "application/json", ".wasm":
                 "application/wasm", ".png": "image/png", ".ttf": "font/ttf"}.get(p.suffix, "application/octet-stream")
        self.send_header("Content-Type", ctype)
        self.send_header("Access-Control-Allow-Origin", "*")
        self.send_header("Accept-Ranges", "bytes")
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
        self.send_header("Content-Length", str(end - start + 1))
        self.end_headers()
        if body:
            self.wfile.write(data[start:end + 1])


def end_time(path: Path) -> str:
    """The recording's last message log time, RFC 3339 (the app's ``time`` deep-link parameter)."""
    from mcap.reader import make_reader
    with open(path, "rb") as f:
        stats = make_reader(f).get_summary().statistics
    ns = stats.message_end_time
    t = dt.datetime.fromtimestamp(ns // 10**9, dt.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S") + f".{ns % 10**9:09d}Z"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mcap", nargs="?", type=Path, help="an existing --foxglove-mcap recording (default: record "
                    "one: rt-runtime replay --until 6 --foxglove-mcap, the built-in scenario)")
    ap.add_argument("--layout", type=Path, default=ROOT / "config" / "foxglove_layout.json")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "live_view_app.png")
    ap.add_argument("--viewer", type=Path, default=Path(os.environ.get("RT_VIEWER_DIR", "/opt/viewer")),
                    help="the npm folder holding @foxglove/studio-base, react, react-dom, playwright-core")
    ap.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    ap.add_argument("--size", default="1600x1000", help="the window, WIDTHxHEIGHT px")
    ap.add_argument("--settle", type=float, default=8.0, help="s to wait after the recording is open")
    ap.add_argument("--keep", type=Path, help="keep the recording made here at this path")
    argv = sys.argv[1:] if argv is None else argv
    extra = argv[argv.index("--") + 1:] if "--" in argv else []   # after --: more options for the replay
    args = ap.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    if extra and args.mcap is not None:
        ap.error("replay options after -- record a new MCAP: give no MCAP path with them")
    modules = args.viewer / "node_modules"
    need = [modules / "@foxglove/studio-base/assets/index.js", modules / "react/umd/react.production.min.js",
            modules / "react-dom/umd/react-dom.production.min.js", modules / "playwright-core", Path(args.chromium)]
    missing = [str(p) for p in need if not p.exists()]
    if missing or shutil.which("node") is None:
        raise SystemExit("screenshot_live_view: the viewer is not installed (see this script's docstring): "
                         + ", ".join(missing or ["node"]))
    width, height = args.size.split("x")
    with tempfile.TemporaryDirectory(prefix="screenshot_live_view.") as tmp:
        tmpd = Path(tmp)
        if args.mcap is None:
            mcap = args.keep or tmpd / "live.mcap"
            print("recording:", record(mcap, extra))
        else:
            mcap = args.mcap
        name = "rt_runtime: " + (args.layout.name if not args.layout.is_relative_to(ROOT)
                                 else str(args.layout.relative_to(ROOT)))
        (tmpd / "index.html").write_text(PAGE)
        (tmpd / "host.js").write_text(HOST % {"layout_id": json.dumps(LAYOUT_ID), "layout_name": json.dumps(name)})
        (tmpd / "driver.cjs").write_text(DRIVER)
        Site.files = {"/": tmpd / "index.html", "/index.html": tmpd / "index.html", "/host.js": tmpd / "host.js",
                      "/react.js": modules / "react/umd/react.production.min.js",
                      "/react-dom.js": modules / "react-dom/umd/react-dom.production.min.js",
                      "/layout.json": args.layout.resolve(), "/live.mcap": mcap.resolve()}
        Site.assets = (modules / "@foxglove/studio-base/assets").resolve()
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Site)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        base = f"http://127.0.0.1:{server.server_address[1]}"
        url = (f"{base}/?ds=remote-file&ds.url={base}/live.mcap&layoutId={LAYOUT_ID}&time={end_time(mcap)}")
        env = dict(os.environ, PLAYWRIGHT_CORE=str(modules / "playwright-core"))
        args.out.parent.mkdir(parents=True, exist_ok=True)
        try:
            done = subprocess.run(["node", str(tmpd / "driver.cjs"), url, str(args.out.resolve()), width, height,
                                   str(args.settle), args.chromium], env=env, timeout=300)
        finally:
            server.shutdown()
            server.server_close()
    if done.returncode != 0:
        raise SystemExit(f"screenshot_live_view: the browser run failed (exit {done.returncode})")
    version = json.loads((modules / "@foxglove/studio-base/package.json").read_text())["version"]
    print(f"{args.out}: {args.out.stat().st_size / 1024:.0f} KiB, Foxglove Studio {version} (@foxglove/studio-base)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
