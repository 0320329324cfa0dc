import subprocess
import sys
import textwrap
import threading

from app.core.lazy_import import lazy_import


def test_module_is_imported_on_first_attribute_read():
    code = textwrap.dedent(
        """
        import sys
        from app.core.lazy_import import lazy_import
        json_tool = lazy_import("json.tool")
        assert "json.tool" not in sys.modules
        assert callable(json_tool.main)
        assert "json.tool" in sys.modules
        print("ok")
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "ok"


def test_many_threads_reading_at_once_all_see_the_real_attribute():
    module = lazy_import("email.mime.text")
    seen: list[object] = []
    threads = [threading.Thread(target=lambda: seen.append(module.MIMEText)) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    from email.mime.text import MIMEText

    assert seen == [MIMEText] * 8


def test_missing_attribute_raises_attribute_error():
    module = lazy_import("json")
    try:
        module.no_such_thing  # noqa: B018
    except AttributeError as exc:
        assert "no_such_thing" in str(exc)
    else:
        raise AssertionError("expected AttributeError")


def test_import_now_loads_the_real_module_for_a_stand_in():
    code = (
        "import sys\n"
        "from app.core.lazy_import import import_now, lazy_import\n"
        "stand_in = lazy_import('json.tool')\n"
        "import_now('json.tool')\n"
        "assert 'json.tool' in sys.modules and stand_in.main is sys.modules['json.tool'].main\n"
        "print('ok')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "ok"
