// The Flex Consumption plan and the function app: Python 3.11, the deployment package in a
// blob container reached with the identity, and the app settings.
//
// App settings: every setting config.py declares (app-settings.json, generated from
// config.declarations()), STATE_STORE=cosmos, and every connection in its identity form
// (<connection>__credential=managedidentity, __clientId, and the service's URI), so no
// setting holds a key. None of the settings Flex Consumption rejects (FUNCTIONS_WORKER_RUNTIME,
// FUNCTIONS_EXTENSION_VERSION, WEBSITE_RUN_FROM_PACKAGE, ...): the runtime is
// functionAppConfig.runtime. PYTHON_ISOLATE_WORKER_DEPENDENCIES=1 makes the worker load the
// app's protobuf and grpcio pins (requirements.txt). Telemetry (C9): host.json's telemetryMode
// is OpenTelemetry, PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY and PYTHON_ENABLE_OPENTELEMETRY
// let the Python worker export the app's OpenTelemetry to Application Insights, which takes
// it only with Entra ID: APPLICATIONINSIGHTS_AUTHENTICATION_STRING names the identity, which
// holds Monitoring Metrics Publisher on the component (monitoring.bicep).
//
// Always ready (alwaysReadyInstances > 0): the durable group and each Service Bus-triggered
// function (its own scale group on Flex) keep that many warm instances, so the first message
// after an idle spell does not wait for a cold start.
param name string
param planName string
param location string
param tags object
param identityId string
param identityClientId string
param storageAccountName string
param deploymentContainerName string
param appInsightsName string
param serviceBusNamespaceFqdn string
param cosmosEndpoint string
@allowed(['dts', 'azureStorage'])
param durableBackend string = 'dts'
param dtsEndpoint string = ''
param taskHubName string = ''
@description('Comma-separated reply queues of the client apps (REPLY_QUEUES, R1).')
param replyQueues string = ''
param stockServiceUrl string = ''
param paymentServiceUrl string = ''
param shippingServiceUrl string = ''
@allowed([512, 2048, 4096])
param instanceMemoryMB int = 2048
param maximumInstanceCount int = 100
param alwaysReadyInstances int = 0
param subnetId string = ''
@description('Client id of the console\'s Entra app registration; empty deploys without App Service authentication (function keys alone).')
param consoleAuthClientId string = ''
@description('Object ids of the Entra groups whose members may call the console.')
param consoleOperatorGroupIds array = []
@description('Object ids of the users or service principals that may call the console.')
param consoleOperatorPrincipalIds array = []
@description('The console\'s named operator keys without App Service authentication: name:role:sha256 entries (CONSOLE_KEYS); hashes, never keys.')
param consoleKeys string = ''

// The app's Service Bus-triggered functions, each its own scale group on Flex Consumption.
var serviceBusFunctions = [
  'receive_order'
  'receive_agent_response'
  'stock_agent'
  'payment_agent'
  'shipping_agent'
]
var alwaysReadyServiceBus = [
  for function in serviceBusFunctions: {
    name: 'function:${function}'
    instanceCount: alwaysReadyInstances
  }
]
var alwaysReadyDurable = [
  {
    name: 'durable'
    instanceCount: alwaysReadyInstances
  }
]
var alwaysReady = alwaysReadyInstances > 0 ? concat(alwaysReadyDurable, alwaysReadyServiceBus) : []

// Every setting config.py declares, at its default (tests/infra/app_settings.py writes it).
var declaredSettings = loadJsonContent('../app-settings.json')

var deploymentSettings = {
  STATE_STORE: 'cosmos'
  REPLY_QUEUES: replyQueues
  // The console trusts App Service authentication's principal header only when it is in
  // front; otherwise any client could write that header (domain/operator_access.py).
  CONSOLE_AUTH: consoleAuthEnabled ? 'easyauth' : 'keys'
  CONSOLE_KEYS: consoleKeys
  STOCK_SERVICE_URL: stockServiceUrl
  PAYMENT_SERVICE_URL: paymentServiceUrl
  SHIPPING_SERVICE_URL: shippingServiceUrl
  PYTHON_ISOLATE_WORKER_DEPENDENCIES: '1'
  // DefaultAzureCredential in the app's own SDK clients (Service Bus publisher, Cosmos).
  AZURE_CLIENT_ID: identityClientId
  AzureWebJobsStorage__credential: 'managedidentity'
  AzureWebJobsStorage__clientId: identityClientId
  AzureWebJobsStorage__blobServiceUri: storageAccount.properties.primaryEndpoints.blob
  ServiceBusConnection__fullyQualifiedNamespace: serviceBusNamespaceFqdn
  ServiceBusConnection__credential: 'managedidentity'
  ServiceBusConnection__clientId: identityClientId
  CosmosConnection__accountEndpoint: cosmosEndpoint
  CosmosConnection__credential: 'managedidentity'
  CosmosConnection__clientId: identityClientId
  APPLICATIONINSIGHTS_CONNECTION_STRING: appInsights.properties.ConnectionString
  APPLICATIONINSIGHTS_AUTHENTICATION_STRING: 'ClientId=${identityClientId};Authorization=AAD'
  // host.json telemetryMode OpenTelemetry: the worker configures the Azure Monitor distro
  // (azure-monitor-opentelemetry) and exports the app's spans, metrics and logs itself.
  PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY: 'true'
  PYTHON_ENABLE_OPENTELEMETRY: 'true'
}

// host.json names the Durable Task Scheduler (storageProvider azureManaged, hubName
// %TASKHUB_NAME%). The Azure Storage backend overrides the provider with
// AzureFunctionsJobHost__ settings and needs the host storage's queues and tables.
var dtsSettings = {
  DURABLE_TASK_SCHEDULER_CONNECTION_STRING: 'Endpoint=${dtsEndpoint};Authentication=ManagedIdentity;ClientID=${identityClientId}'
  TASKHUB_NAME: taskHubName
}
var azureStorageSettings = {
  AzureWebJobsStorage__queueServiceUri: storageAccount.properties.primaryEndpoints.queue
  AzureWebJobsStorage__tableServiceUri: storageAccount.properties.primaryEndpoints.table
  TASKHUB_NAME: 'OrderProcessing'
  AzureFunctionsJobHost__extensions__durableTask__storageProvider__type: 'AzureStorage'
  AzureFunctionsJobHost__extensions__durableTask__storageProvider__connectionName: 'AzureWebJobsStorage'
  AzureFunctionsJobHost__extensions__durableTask__storageProvider__connectionStringName: 'AzureWebJobsStorage'
}
var durableSettings = durableBackend == 'dts' ? dtsSettings : azureStorageSettings

resource storageAccount 'Microsoft.Storage/storageAccounts@2023-05-01' existing = {
  name: storageAccountName
}

resource appInsights 'Microsoft.Insights/components@2020-02-02' existing = {
  name: appInsightsName
}

resource plan 'Microsoft.Web/serverfarms@2024-04-01' = {
  name: planName
  location: location
  tags: tags
  kind: 'functionapp'
  // checkov:skip=CKV_AZURE_225:zone redundancy of Flex Consumption is regional and billed as always-ready instances; a deployer turns it on where offered
  sku: {
    name: 'FC1'
    tier: 'FlexConsumption'
  }
  properties: {
    reserved: true
  }
}

resource site 'Microsoft.Web/sites@2024-04-01' = {
  name: name
  location: location
  tags: union(tags, {
    'azd-service-name': 'api'
  })
  kind: 'functionapp,linux'
  // checkov:skip=CKV_AZURE_78:Flex Consumption supports no FTP(S) deployment and refuses ftpsState (Flex Consumption plan deprecations)
  identity: {
    type: 'UserAssigned'
    userAssignedIdentities: {
      '${identityId}': {}
    }
  }
  // checkov:skip=CKV_AZURE_222:the operator console is reached from operators' machines, behind Entra ID (consoleAuth) and function keys; public access also serves azd's deployment endpoint
  properties: {
    serverFarmId: plan.id
    // checkov:skip=CKV_AZURE_17:operators call the console with an Entra ID token and a function key, not a client certificate
    httpsOnly: true
    clientCertEnabled: false
    // checkov:skip=CKV_AZURE_212:Flex Consumption scales from zero; alwaysReadyInstances keeps warm instances when wanted
    virtualNetworkSubnetId: empty(subnetId) ? null : subnetId
    // checkov:skip=CKV_AZURE_213:the only HTTP functions are the operator console's, no health endpoint; Flex Consumption replaces unhealthy instances itself
    siteConfig: {
      minTlsVersion: '1.2'
      http20Enabled: true
    }
    functionAppConfig: {
      deployment: {
        storage: {
          type: 'blobContainer'
          value: '${storageAccount.properties.primaryEndpoints.blob}${deploymentContainerName}'
          authentication: {
            type: 'UserAssignedIdentity'
            userAssignedIdentityResourceId: identityId
          }
        }
      }
      scaleAndConcurrency: {
        instanceMemoryMB: instanceMemoryMB
        maximumInstanceCount: maximumInstanceCount
        alwaysReady: alwaysReady
      }
      runtime: {
        name: 'python'
        version: '3.11'
      }
    }
  }
}

// The checks skipped here read a web app's site settings (logging, authentication, .NET,
// Azure Files, public access) on a resource that holds app settings only; none applies to it.
resource appSettings 'Microsoft.Web/sites/config@2024-04-01' = {
  // checkov:skip=CKV_AZURE_66:web server logging, not an app setting; the app logs to Application Insights
  // checkov:skip=CKV_AZURE_63:web server logging, not an app setting; the app logs to Application Insights
  parent: site
  // checkov:skip=CKV_AZURE_65:web server error pages, not an app setting
  // checkov:skip=CKV_AZURE_13:App Service authentication is the authsettingsV2 resource consoleAuth, not an app setting
  name: 'appsettings'
  // checkov:skip=CKV_AZURE_222:public access is a site property (see the site)
  // checkov:skip=CKV_AZURE_80:a .NET setting; the app is Python
  properties: union(declaredSettings, deploymentSettings, durableSettings)
  // checkov:skip=CKV_AZURE_88:Flex Consumption deploys from a blob container, not an Azure Files share
}

// App Service authentication (Easy Auth, authsettingsV2) in front of the operator console (E8,
// C2) when consoleAuthClientId names an app registration: every request needs an Entra ID
// session or access token for that registration, issued in this tenant, or gets 401; then the
// function key as before. Only members of consoleOperatorGroupIds or the principals of
// consoleOperatorPrincipalIds pass (the built-in authorization policy, allowedPrincipals;
// with both empty any principal holding a token passes); the registration's "assignment
// required" with its Console.Operator app role narrows who gets a token at all (docs/console.md).
// Browser sign-in uses the ID token flow, so no client secret is stored anywhere.
//
// Excluded: /runtime/webhooks/durabletask, the Durable Functions HTTP API, which the host
// protects with its durabletask_extension system key; the app's own durable client reaches
// the extension on the host's local endpoint, not through the site. The host's admin APIs
// (/admin) stay behind Easy Auth and the master key: deployment and trigger sync go through
// the scm site and Azure Resource Manager, not /admin. Nothing else of the app is HTTP.
var consoleAuthEnabled = !empty(consoleAuthClientId)
var consoleAuthExcludedPaths = [
  '/runtime/webhooks/durabletask'
]

// The checks skipped here read other kinds of site config (logging, error pages, .NET, Azure
// Files, public access) or the V1 authsettings shape, and checkov's Bicep reader does not see
// the properties of a conditional resource; tests/infra/test_console_auth.py checks these.
resource consoleAuth 'Microsoft.Web/sites/config@2024-04-01' = if (consoleAuthEnabled) {
  // checkov:skip=CKV_AZURE_13:reads V1 authsettings (properties.enabled); this is authsettingsV2 with platform.enabled true
  // checkov:skip=CKV_AZURE_70:httpSettings.requireHttps is true; checkov does not see a conditional resource's properties
  parent: site
  // checkov:skip=CKV_AZURE_63:web server logging, not authentication; the app logs to Application Insights
  // checkov:skip=CKV_AZURE_66:web server logging, not authentication; the app logs to Application Insights
  name: 'authsettingsV2'
  // checkov:skip=CKV_AZURE_65:web server error pages, not authentication
  // checkov:skip=CKV_AZURE_80:a .NET setting; the app is Python
  // checkov:skip=CKV_AZURE_88:Flex Consumption deploys from a blob container, not an Azure Files share
  // checkov:skip=CKV_AZURE_222:public access is a site property (see the site)
  properties: {
    platform: {
      enabled: true
    }
    globalValidation: {
      requireAuthentication: true
      unauthenticatedClientAction: 'Return401'
      excludedPaths: consoleAuthExcludedPaths
    }
    httpSettings: {
      requireHttps: true
    }
    identityProviders: {
      azureActiveDirectory: {
        enabled: true
        registration: {
          clientId: consoleAuthClientId
          openIdIssuer: '${environment().authentication.loginEndpoint}${tenant().tenantId}/v2.0'
        }
        validation: {
          allowedAudiences: [
            'api://${consoleAuthClientId}'
            consoleAuthClientId
          ]
          defaultAuthorizationPolicy: {
            allowedPrincipals: {
              groups: consoleOperatorGroupIds
              identities: consoleOperatorPrincipalIds
            }
          }
        }
      }
    }
    login: {
      tokenStore: {
        enabled: false
      }
    }
  }
}

output name string = site.name
output consoleAuthEnabled bool = consoleAuthEnabled
output defaultHostName string = site.properties.defaultHostName
