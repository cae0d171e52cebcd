data "aperio_scaling_hooks" "all" {}

# Hooks the breaker disarmed after five failed calls in a row.
output "tripped" {
  value = [for h in data.aperio_scaling_hooks.all.hooks : h.hostname if h.breaker == "open"]
}
