"""Ways model outputs reach the grader: canary prober, pass-through tap, ingest API; plus the
grading pipeline that counts them by concurrency and keeps the bad ones for triage."""
