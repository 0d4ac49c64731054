"""Everything that runs the `nsys` binary: finding it and reading its flags (find.py), profiling a command
or each rank of a torchrun launch (launch.py, ranks.py), importing and exporting reports (export.py).

No other module shells out to nsys. Default flags a given nsys does not know are left out of the command
(`build_profile_command` returns them; `harness doctor` lists them), so one harness works with the Debian
2022.4 build (no --python-backtrace) and with current releases.
"""

from harness.core.records import CAPTURE_RANGE  # the key runs keep nsys's capture range under
from harness.execution.nsys.export import (
    TAIL_LINES,
    _existing,
    _left_qdstrm,
    _same_version,
    _tail,
    export_report,
    export_sqlite,
    find_importer,
    import_qdstrm,
)
from harness.execution.nsys.find import (
    HOW_TO_GET,
    INSTALL_PLACES,
    PROJECT_LOCAL,
    REPO,
    NsysInfo,
    candidates,
    find_nsys,
    probe,
)
from harness.execution.nsys.launch import (
    DEFAULT_TRACE,
    LIGHT_ARGS,
    RANK_PATTERN,
    SHORT_FLAGS,
    ProfileOptions,
    ProfileResult,
    _env_for,
    _flag_name,
    _generated,
    build_profile_command,
    capture_range_in,
    check_extra_args,
    duration_in,
    duration_kill_in,
    profile,
    rank_profile_command,
    rank_report,
    report_base,
    requested_output,
)

__all__ = [
    "CAPTURE_RANGE",
    "DEFAULT_TRACE",
    "HOW_TO_GET",
    "INSTALL_PLACES",
    "LIGHT_ARGS",
    "PROJECT_LOCAL",
    "RANK_PATTERN",
    "REPO",
    "SHORT_FLAGS",
    "TAIL_LINES",
    "NsysInfo",
    "ProfileOptions",
    "ProfileResult",
    "_env_for",
    "_existing",
    "_flag_name",
    "_generated",
    "_left_qdstrm",
    "_same_version",
    "_tail",
    "build_profile_command",
    "candidates",
    "capture_range_in",
    "check_extra_args",
    "duration_in",
    "duration_kill_in",
    "export_report",
    "export_sqlite",
    "find_importer",
    "find_nsys",
    "import_qdstrm",
    "probe",
    "profile",
    "rank_profile_command",
    "rank_report",
    "report_base",
    "requested_output",
]
