# Call https://api.provider.example/apps/web/scale with the desired number of
# instances of app.example.com: one on the first request after it sleeps,
# one more after 15 s above 80% utilization, one fewer after a minute below
# 40%, never more than 8.
resource "aperio_scaling_hook" "web" {
  hostname           = "app.example.com"
  url                = "https://api.provider.example/apps/web/scale"
  min                = 0
  max                = 8
  cold_start         = "45s"
  target_utilization = 0.8
  window             = "15s"
  cooldown           = "60s"

  # Sent as Authorization: Bearer; never stored in state. Bump the version
  # to send a new one.
  secret_wo         = var.scale_secret
  secret_wo_version = 1
}

variable "scale_secret" {
  type      = string
  sensitive = true
}
