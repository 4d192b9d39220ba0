"""Published measurement tables read into fsdpsim's measurement schema."""
