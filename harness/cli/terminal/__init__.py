"""The terminal's layout, apart from the commands: tables that fit the terminal (fit.py), a DataFrame as a
rich table, csv or json and the lines said on stderr (output.py), standard output and error guarded
(streams.py), the progress bar (progress.py). The commands import it; it imports no command."""
