# Import a hook by its id, or by the hostname it scales.
terraform import aperio_scaling_hook.web sh_3f9c2a7d4e1b0c8a6f5e2d1c
terraform import aperio_scaling_hook.web app.example.com
