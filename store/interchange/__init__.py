"""Moving sessions in and out as Pi's JSONL files: import of files and folders (byte-exact storage
of every line, streaming, incremental for files that grew), sync of a live sessions folder,
export (the same bytes back, the v3 form Pi rewrites, or a whole store in Pi's layout) and
verification. ``importing`` and ``syncing`` take files in, ``reading`` turns a file into rows
(optionally in a worker process), ``exporting`` writes them out, ``verifying`` checks them."""
