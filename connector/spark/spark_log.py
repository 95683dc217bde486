"""Where the driver JVM's log goes: one line per event on the console, the stack traces in a debug log file.

When a streaming query fails, Spark logs the failure several times before PySpark hands it to the job: the
executor's "Exception in task", the scheduler's "Lost task" (the whole JVM stack, and a Python traceback, inside
the message), "aborting job", and the query's "terminated with error", hundreds of lines in all. The job then
reports the failure once, as one ``error:`` line (``connector.healing.query_failure``), which those lines bury.

So, when Spark's own default log profile is in effect, the console keeps only Spark's one-line warnings, without
stacks; every event at WARN and above, stacks and all, goes to a size-capped debug log file, which the job's
``error:`` line names. An operator who configured Spark's logging (``log4j2.properties`` in ``SPARK_CONF_DIR``,
``-Dlog4j2.configurationFile``) keeps exactly that configuration.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: The names of the appenders put in place of Spark's console appender.
FILE_APPENDER = "connector-debug-log"
CONSOLE_APPENDER = "connector-console"
#: Where Spark's default profile comes from: only that configuration is rearranged.
SPARK_DEFAULT_PROFILE = "org/apache/spark/log4j2-defaults.properties"
#: The debug log rolls over at this size, keeping this many older files: it cannot fill the checkpoint's volume.
ROLL_SIZE = "20MB"
ROLL_KEEP = 3
#: Spark's default console pattern without its ``%ex`` (the stack goes to the file instead).
CONSOLE_PATTERN = "%d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n"
FILE_PATTERN = "%d{ISO8601} %p [%t] %c: %m%n%ex"
#: A message spanning lines: Spark writes task failures' stacks into the message itself.
MULTI_LINE = "(?s).*[\\r\\n].*"


def route_to_file(spark: SparkSession, path: Path) -> Path | None:
    """Send the driver JVM's log events with stacks, and its errors, to ``path``; keep one-line warnings on the console.

    Returns:
        ``path`` when the log now goes there, ``None`` when the operator's own log configuration was left as it is.
    """
    jvm: Any = spark.sparkContext._jvm
    gateway: Any = spark.sparkContext._gateway
    context = jvm.org.apache.logging.log4j.LogManager.getContext(False)
    config = context.getConfiguration()
    existing = config.getAppender(FILE_APPENDER)
    if existing is not None:
        return Path(str(existing.getFileName()))
    location = config.getConfigurationSource().getLocation()
    if location is None or not str(location).endswith(SPARK_DEFAULT_PROFILE):
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    core = jvm.org.apache.logging.log4j.core
    result = getattr(core, "Filter$Result")
    level = jvm.org.apache.logging.log4j.Level
    filters = gateway.new_array(core.Filter, 2)
    filters[0] = core.filter.ThresholdFilter.createFilter(level.ERROR, result.DENY, result.NEUTRAL)
    filters[1] = core.filter.RegexFilter.createFilter(MULTI_LINE, None, False, result.DENY, result.NEUTRAL)
    console = (
        core.appender.ConsoleAppender.newBuilder()
        .setName(CONSOLE_APPENDER)
        .setTarget(getattr(core.appender, "ConsoleAppender$Target").SYSTEM_ERR)
        .setLayout(_layout(core, config, CONSOLE_PATTERN, with_stacks=False))
        .setFilter(core.filter.CompositeFilter.createFilters(filters))
        .setConfiguration(config)
        .build()
    )
    rolling = core.appender.rolling
    debug_file = (
        core.appender.RollingFileAppender.newBuilder()
        .setName(FILE_APPENDER)
        .withFileName(str(path))
        .withFilePattern(f"{path}.%i")
        .withAppend(True)
        .withPolicy(rolling.SizeBasedTriggeringPolicy.createPolicy(ROLL_SIZE))
        .withStrategy(rolling.DefaultRolloverStrategy.newBuilder().withMax(str(ROLL_KEEP)).withConfig(config).build())
        .setLayout(_layout(core, config, FILE_PATTERN, with_stacks=True))
        .setConfiguration(config)
        .build()
    )
    console.start()
    debug_file.start()
    config.addAppender(console)
    config.addAppender(debug_file)
    root = config.getRootLogger()
    for name in list(root.getAppenders().keySet()):
        if root.getAppenders().get(name).getClass().getSimpleName() == "ConsoleAppender":
            root.removeAppender(name)
    root.addAppender(console, None, None)
    root.addAppender(debug_file, None, None)
    context.updateLoggers()
    return path


def debug_log() -> Path | None:
    """The file the driver JVM's stacks go to now; ``None`` when none (no JVM, or the operator's configuration)."""
    from pyspark import SparkContext

    jvm: Any = SparkContext._jvm
    if jvm is None:
        return None
    appender = jvm.org.apache.logging.log4j.LogManager.getContext(False).getConfiguration().getAppender(FILE_APPENDER)
    return Path(str(appender.getFileName())) if appender is not None else None


def write_to_debug_log(text: str) -> Path | None:
    """Append a failure's full text (a JVM exception PySpark raised) to the debug log; where it went, if anywhere.

    It is logged through the JVM's logging, so it lands in the file in order with Spark's own events, and, as a
    multi-line error, never on the console.
    """
    path = debug_log()
    if path is not None:
        from pyspark import SparkContext

        jvm: Any = SparkContext._jvm
        jvm.org.apache.logging.log4j.LogManager.getLogger("connector.stream.job").error(text)
    return path


def _layout(core: Any, config: Any, pattern: str, *, with_stacks: bool) -> Any:
    return (
        core.layout.PatternLayout.newBuilder()
        .withPattern(pattern)
        .withConfiguration(config)
        .withAlwaysWriteExceptions(with_stacks)
        .build()
    )
