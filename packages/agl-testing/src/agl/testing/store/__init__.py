"""Stores for tests: the backend fixtures (:mod:`.fixtures`), fresh stores by backend name (:mod:`.backends`),
a store served over real HTTP and raw requests to it (:mod:`.http`), fresh SQL databases (:mod:`.sql`) and the
code SQL tests run in other threads and processes (:mod:`.sql_workers`)."""
