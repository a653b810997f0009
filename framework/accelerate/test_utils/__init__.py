"""``accelerate.test_utils``' names that Accelerate's example scripts import."""
