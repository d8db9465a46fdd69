"""Scratch: read every worker's spool file (OAISHIM_X_SPOOL prefix) every INTERVAL seconds at nice
10, split the frames and keep nothing; remove a file once its writer is gone and it is read."""

import glob
import os
import sys
import time

from oaishim.server.capture_frame import frames

prefix, interval = sys.argv[1], float(sys.argv[2])
os.nice(10)
open_files: dict[str, tuple[int, bytearray]] = {}
count = 0
while True:
    for path in glob.glob(prefix + ".*"):
        if path not in open_files:
            open_files[path] = (os.open(path, os.O_RDONLY), bytearray())
        fd, buffer = open_files[path]
        while data := os.read(fd, 1 << 20):
            buffer += data
            count += len(frames(buffer))
        try:
            os.kill(int(path.rsplit(".", 1)[1]), 0)
        except ProcessLookupError:
            os.close(fd)
            os.unlink(path)
            del open_files[path]
    time.sleep(interval)
