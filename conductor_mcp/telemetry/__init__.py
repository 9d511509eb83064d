"""What a service tells its operator about itself: Prometheus metrics and OpenTelemetry traces of its runs."""
