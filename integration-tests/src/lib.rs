//! End-to-end tests that start the real `canopy` binaries on loopback; the tests live in `tests/`.
