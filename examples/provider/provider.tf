terraform {
  required_providers {
    qod = {
      source = "terraform.local/qodaperio/qod"
    }
  }
}

# endpoint and api_key may also come from QOD_ENDPOINT and QOD_API_KEY.
provider "qod" {
  endpoint = "http://127.0.0.1:20900"
  api_key  = var.qod_api_key
}

variable "qod_api_key" {
  type      = string
  sensitive = true
}
