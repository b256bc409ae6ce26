"""Views: layout only. They show what controllers say and pass user actions back to them."""
