"""spindle's benchmark lab: runs the seed experiments against every
concurrency model and nginx, and writes bench/results/<timestamp>/."""
