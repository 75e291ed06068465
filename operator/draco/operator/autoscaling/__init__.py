"""The autoscaling controller: device demand autoscalers can see, and scale-down protection."""
