terraform {
  required_providers {
    aperio = {
      source = "terraform.local/qodaperio/aperio"
    }
  }
}

# endpoint and api_key may also come from APERIO_ENDPOINT and APERIO_API_KEY.
provider "aperio" {
  endpoint = "http://127.0.0.1:20900"
  api_key  = var.aperio_api_key
}

variable "aperio_api_key" {
  type      = string
  sensitive = true
}
