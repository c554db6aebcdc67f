"""A local Hub server for kernel repositories."""
